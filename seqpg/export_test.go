package seqpg

// The statements that read and complete a held key's jobs, for
// depth_test.go, and the claim, for idlekeys_test.go, which check what
// each reads whatever the planner's statistics say.
var (
	SQLClaim         = sqlClaim
	SQLHead          = sqlHead
	SQLDoneNext      = sqlDoneNext
	SQLSettle        = sqlSettle
	SQLFetch         = sqlFetch
	SQLCompleteBatch = sqlCompleteBatch
	SQLRetry         = sqlRetry
	SQLHalt          = sqlHalt
	SQLDead          = sqlDead
)
