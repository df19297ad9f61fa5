package seqprom_test

import "runtime"

func runtimeGoexit() { runtime.Goexit() }
