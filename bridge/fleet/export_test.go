package fleet

import "github.com/nats-io/nats.go"

// IngestPending is how many messages NATS put in the node's channel of
// ingest and forwards that it has not taken yet.
func (n *Node) IngestPending() int { return len(n.in) }

// BatchPublish is a publish of a forwarded batch.
type BatchPublish struct {
	Subject, Reply string
	Header         nats.Header
	Data           []byte
}

// ErrBatch is the error of a batch that cannot be read.
var ErrBatch = errBatch

// EncodeBatch is the payload of a batch of ps.
func EncodeBatch(ps []BatchPublish) []byte {
	b := []byte{batchVersion}
	for _, p := range ps {
		b = appendForwarded(b, forwarded{msg: &nats.Msg{Header: p.Header, Data: p.Data}, target: p.Subject}, p.Reply)
	}
	return b
}

// DecodeBatch reads the publishes of a batch's payload.
func DecodeBatch(b []byte) ([]BatchPublish, error) {
	fs, err := decodeBatch(b)
	var out []BatchPublish
	for _, f := range fs {
		out = append(out, BatchPublish{Subject: f.target, Reply: f.msg.Reply, Header: f.msg.Header, Data: f.msg.Data})
	}
	return out, err
}
