package console_test

import (
	"strings"
	"testing"
)

// TestConsole_Message_ShowsThrottleAndDebounce checks that the message
// page shows a throttled message's window and a debounced one's burst,
// and neither for a plain message.
func TestConsole_Message_ShowsThrottleAndDebounce(t *testing.T) {
	s := serve(t, "127.0.0.1:0", true, nil)
	s.schedule(t, "shown.throttled", []byte("1"), "Delay-Id", "h", "Delay-Throttle", "1h")
	// The first is due at once; the second is held an hour.
	throttled := s.schedule(t, "shown.throttled", []byte("2"), "Delay-Id", "h", "Delay-Throttle", "1h")
	debounced := s.schedule(t, "shown.debounced", []byte("m"), "Delay-Id", "d", "Delay-Debounce", "1h", "Delay-Debounce-Max", "2h")
	plain := s.schedule(t, "shown.plain", []byte("m"), "Delay", "1h")
	_, page, _ := get(t, s.base+"/ui/message?tag="+throttled, "", "")
	if !strings.Contains(page, `<dd id="throttle">at most one delivery per 1h0m0s</dd>`) {
		t.Errorf("throttled message's page shows no throttle:\n%s", page)
	}
	_, page, _ = get(t, s.base+"/ui/message?tag="+debounced, "", "")
	if !strings.Contains(page, `id="debounce">a burst begun at `) || !strings.Contains(page, `delivered at the latest 2h0m0s after it`) {
		t.Errorf("debounced message's page shows no debounce:\n%s", page)
	}
	_, page, _ = get(t, s.base+"/ui/message?tag="+plain, "", "")
	if strings.Contains(page, `id="throttle"`) || strings.Contains(page, `id="debounce"`) {
		t.Errorf("plain message's page shows a throttle or debounce:\n%s", page)
	}
}
