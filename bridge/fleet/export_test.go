package fleet

import "github.com/nats-io/nats.go"

// IngestPending is how many messages NATS holds for the node's ingest
// handler, not handed to it yet.
func (n *Node) IngestPending() int {
	p, _, err := n.ingest.Pending()
	if err != nil {
		return -1
	}
	return p
}

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
