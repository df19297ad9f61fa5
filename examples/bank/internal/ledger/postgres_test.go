package ledger

import (
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// TestPostgres reruns the bank's tests on Postgres through pgx, with the
// same code, when BANK_POSTGRES_URL names a database (for example
// postgres://bank:bank@127.0.0.1:5432/bank). It EMPTIES the tables accounts,
// ledger and requests there: point it at a scratch database.
func TestPostgres(t *testing.T) {
	dsn := os.Getenv("BANK_POSTGRES_URL")
	if dsn == "" {
		t.Skip("BANK_POSTGRES_URL is not set; the Postgres variant is skipped")
	}
	postgresDSN = dsn
	t.Cleanup(func() { postgresDSN = "" })
	for _, test := range []func(*testing.T){
		TestScriptSubmittedBackToBackEndsAtZero,
		TestBadInputReturnsErrorAndLeavesDatabaseUnchanged,
		TestFrozenAccountRefusesChanges,
		TestFreezeOvertakesQueuedOperations,
		TestAuditOvertakesQueuedOperations,
		TestNaiveTransferIsCaughtByDeadlockGuard,
		TestTransferIsOrderedOnBothAccounts,
		TestConcurrentTransfersInAllDirectionsFinish,
		TestSlowJournalDoesNotDelayAccount,
		TestClosingDatabaseUnderLoadLosesNoCommittedOperation,
		TestRetriedDepositWithARequestIDIsAppliedOnce,
		TestRetriedTransferWithARequestIDIsAppliedOnce,
		TestFailedRequestCanBeRetried,
		TestRequestIDReusedForAnotherOperationIsRefused,
		TestFullAccountQueueRefusesAtOnce,
		TestTransferRefusedByAFullQueueChangesNeitherAccount,
	} {
		name := runtime.FuncForPC(reflect.ValueOf(test).Pointer()).Name()
		t.Run(name[strings.LastIndex(name, ".")+1:], test)
	}
}
