package main

// fetchPages serves LIST, SUBJECTS and SCHEDULES alike. It calls verb with req and hands the decoded page to add, which
// returns the page's Next. With all it follows Next, setting *after (req's
// After field) to it, until a page has none; it returns the Next of the
// last page it fetched.
func fetchPages[Req, Page any](cl *apiClient, verb string, req *Req, after *string, all bool, add func(Page) string) (string, error) {
	for {
		data, err := cl.call(verb, *req)
		if err != nil {
			return "", err
		}
		var page Page
		if err := decodeReply(verb, data, &page); err != nil {
			return "", err
		}
		next := add(page)
		// NB: a next that does not move on would loop forever; stop instead.
		if !all || next == "" || next == *after {
			return next, nil
		}
		*after = next
	}
}
