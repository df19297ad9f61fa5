package seqprom

import "github.com/prometheus/client_golang/prometheus"

// A Namer makes metric descriptors as Options say: the name gets
// WithNamespace's prefix and seqsched_, and the descriptor
// WithConstLabels's labels. NewCollector names its metrics with one; so
// do the collectors of the broker consumers (promjetstream, promkafka),
// which take this package's Options, and so may a collector of your own.
type Namer struct {
	o options
}

// NewNamer checks opts as NewCollector does, with the same errors.
func NewNamer(opts ...Option) (*Namer, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	return &Namer{o}, nil
}

// Desc returns the descriptor of the metric [namespace_]seqsched_<name>,
// with help, the given variable labels and the const labels.
func (n *Namer) Desc(name, help string, variableLabels ...string) *prometheus.Desc {
	return prometheus.NewDesc(n.o.prefix+"seqsched_"+name, help, variableLabels, n.o.labels)
}
