package seqpg

// The statements that read and complete a held key's jobs, for
// depth_test.go, which checks what each reads whatever the planner's
// statistics say.
var (
	SQLHead          = sqlHead
	SQLDoneNext      = sqlDoneNext
	SQLSettle        = sqlSettle
	SQLFetch         = sqlFetch
	SQLCompleteBatch = sqlCompleteBatch
	SQLRetry         = sqlRetry
	SQLHalt          = sqlHalt
	SQLDead          = sqlDead
)
