package delaystore

import "google.golang.org/protobuf/proto"

// Derived returns a new message with m's fields for a caller that builds
// another message from m by setting its scalars and its recurrence: a
// plan's planned form of an occurrence and its successor. The recurrence
// is a copy of its own; the payload, the headers and any unknown fields
// are m's, shared, as no code changes them in place once a message is
// built. proto.Clone copied the payload and each header for both, twice
// for each occurrence planned. TestStoredMessage_Derived holds it to
// every field.
func (m *StoredMessage) Derived() *StoredMessage {
	d := &StoredMessage{
		Subject:         m.Subject,
		Payload:         m.Payload,
		Headers:         m.Headers,
		EnqueuedAtNs:    m.EnqueuedAtNs,
		FireAtNs:        m.FireAtNs,
		TtlNs:           m.TtlNs,
		ExpireAtNs:      m.ExpireAtNs,
		ClientId:        m.ClientId,
		AckPolicy:       m.AckPolicy,
		MaxDeliver:      m.MaxDeliver,
		Attempt:         m.Attempt,
		EventId:         m.EventId,
		MovedBy:         m.MovedBy,
		WrittenOnce:     m.WrittenOnce,
		DebounceFirstNs: m.DebounceFirstNs,
		DebounceMaxNs:   m.DebounceMaxNs,
		ThrottleNs:      m.ThrottleNs,
		unknownFields:   m.unknownFields,
	}
	if m.Recurrence != nil {
		d.Recurrence = proto.Clone(m.Recurrence).(*Recurrence)
	}
	return d
}
