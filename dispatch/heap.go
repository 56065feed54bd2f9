package dispatch

import "container/heap"

// topicHeap orders topics by the time their next message is due.
type topicHeap []*topic

func (h topicHeap) Len() int           { return len(h) }
func (h topicHeap) Less(i, j int) bool { return h[i].next < h[j].next }
func (h topicHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *topicHeap) Push(x any) {
	t := x.(*topic)
	t.idx = len(*h)
	*h = append(*h, t)
}
func (h *topicHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.idx = -1
	return t
}

// schedule puts t in the heap at time next, or moves it there.
func (h *topicHeap) schedule(t *topic, next int64) {
	t.next = next
	if t.idx >= 0 {
		heap.Fix(h, t.idx)
		return
	}
	heap.Push(h, t)
}

// unschedule takes t out of the heap if it is in it.
func (h *topicHeap) unschedule(t *topic) {
	if t.idx >= 0 {
		heap.Remove(h, t.idx)
	}
}

// flightHeap orders in-flight messages by deadline.
type flightHeap []*flight

func (h flightHeap) Len() int           { return len(h) }
func (h flightHeap) Less(i, j int) bool { return h[i].deadline < h[j].deadline }
func (h flightHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *flightHeap) Push(x any) {
	f := x.(*flight)
	f.idx = len(*h)
	*h = append(*h, f)
}
func (h *flightHeap) Pop() any {
	old := *h
	f := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	f.idx = -1
	return f
}

// schedule sets f's deadline and puts it in the heap, or moves it.
func (h *flightHeap) schedule(f *flight, deadline int64) {
	f.deadline = deadline
	if f.idx >= 0 {
		heap.Fix(h, f.idx)
		return
	}
	heap.Push(h, f)
}

// unschedule takes f out of the heap if it is in it.
func (h *flightHeap) unschedule(f *flight) {
	if f.idx >= 0 {
		heap.Remove(h, f.idx)
	}
}
