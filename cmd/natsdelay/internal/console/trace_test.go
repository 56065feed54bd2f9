package console_test

import (
	"strings"
	"testing"
)

// TestConsole_Message_ShowsTraceID checks that the message page shows the
// trace id of the publish that scheduled the message, from its
// traceparent in whatever case it was sent, and no trace for a message
// published without one.
func TestConsole_Message_ShowsTraceID(t *testing.T) {
	s := serve(t, "127.0.0.1:0", true, nil)
	traced := s.schedule(t, "trace.one", []byte("m"), "Delay", "1h", "TraceParent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	plain := s.schedule(t, "trace.one", []byte("m"), "Delay", "1h")
	_, page, _ := get(t, s.base+"/ui/message?tag="+traced, "", "")
	if !strings.Contains(page, `<code id="trace-id">0af7651916cd43dd8448eb211c80319c</code>`) {
		t.Errorf("traced message's page shows no trace id:\n%s", page)
	}
	_, page, _ = get(t, s.base+"/ui/message?tag="+plain, "", "")
	if strings.Contains(page, `id="trace-id"`) {
		t.Errorf("untraced message's page shows a trace:\n%s", page)
	}
}
