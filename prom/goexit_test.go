package prom_test

import "runtime"

func runtimeGoexit() { runtime.Goexit() }
