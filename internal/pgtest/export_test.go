package pgtest

// SkipLiveExamples lets the black-box tests' TestMain act as Main does
// without a server.
var SkipLiveExamples = skipLiveExamples
