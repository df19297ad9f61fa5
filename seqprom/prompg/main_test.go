package prompg_test

import (
	"testing"

	"github.com/seqsched/seqsched/internal/pgtest"
)

// The live tests share one PostgreSQL server (pgtest.Shared); each gets
// its own database on it.
func TestMain(m *testing.M) { pgtest.Main(m) }
