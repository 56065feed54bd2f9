// Package client is natsdelay's Go client: it schedules messages and calls
// the service's API over a nats.go connection, with the wire types of
// package wire, and hands deliveries to consumers with the ack vocabulary
// as methods.
//
// Nothing here is needed to use natsdelay: any NATS client can publish to
// delay.<subject> with a Delay header and answer +ACK. The package saves a
// Go program the protocol's details: the error answers, which come back as
// *wire.ServiceError values that match wire.ErrBadRequest, wire.ErrNotFound,
// wire.ErrConflict and wire.ErrUnavailable with errors.Is; which errors
// are worth a retry (IsRetryable); the paging of LIST, SUBJECTS,
// SCHEDULES and DEAD.LIST, walked as iterators, and the steps of a bulk
// operation (BulkAll). Requests are package wire's types; answers are
// the client's own, with each time a time.Time.
//
// Retries: with WithRetry, a request that failed in a way that may pass
// (no responders, no answer in time, a 503) is sent again, after a pause
// that doubles each time up to MaxRetryWait, drawn between half of it and
// all of it. Schedule retries a message with an ID after any
// of them: the service answers a resend of the same message (subject,
// Delay-Id and content) within its duplicate window with the first reply
// (Scheduled.Duplicate), even when the first was already delivered, and
// outside it replaces a pending message of the same subject and Delay-Id,
// so a retry after an answer that was lost stores the message once. A message without an ID is retried only after no responders,
// which says that no service received it (none runs there, or a cluster
// is between leaders); after a timeout or a 503 it may have been stored,
// a retry could store it twice, and the error is returned. Cancel and
// DeleteLimit are likewise retried only after no responders, since a
// retry after a lost answer would be told 404 for what the first did.
// A Bulk step with an operation id (BulkRequest.Op) is retried after any
// of them, since the service moves no message twice for one operation;
// a real step without one only after no responders.
package client
