module github.com/seqsched/seqsched/examples

go 1.25

replace github.com/seqsched/seqsched => ../
