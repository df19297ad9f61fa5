// Package kafkatest measures seqwatermill on watermill-kafka against
// franz-go's kfake, an in-process Kafka: order per key and throughput, a
// plain Router against the decorator. It is a module of its own so that
// watermill-kafka, Sarama and kfake stay out of seqwatermill's go.mod.
package kafkatest
