module github.com/seqsched/seqsched/bench

go 1.25

replace github.com/seqsched/seqsched => ../
