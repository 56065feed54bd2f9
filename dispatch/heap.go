package dispatch

import "container/heap"

// heapElem is what minHeap orders: a time key, and the element's own index
// in the heap so it can be moved or removed without a search.
type heapElem interface {
	heapKey() int64
	setHeapKey(int64)
	index() *int // -1 when not in a heap
}

// minHeap orders elements by key, earliest first. The zero value is empty.
type minHeap[T heapElem] []T

func (h minHeap[T]) Len() int           { return len(h) }
func (h minHeap[T]) Less(i, j int) bool { return h[i].heapKey() < h[j].heapKey() }
func (h minHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	*h[i].index(), *h[j].index() = i, j
}
func (h *minHeap[T]) Push(x any) {
	e := x.(T)
	*e.index() = len(*h)
	*h = append(*h, e)
}
func (h *minHeap[T]) Pop() any {
	old := *h
	e := old[len(old)-1]
	var zero T
	old[len(old)-1] = zero
	*h = old[:len(old)-1]
	*e.index() = -1
	return e
}

// schedule sets e's key and puts it in the heap, or moves it there.
func (h *minHeap[T]) schedule(e T, key int64) {
	e.setHeapKey(key)
	if i := *e.index(); i >= 0 {
		heap.Fix(h, i)
		return
	}
	heap.Push(h, e)
}

// unschedule takes e out of the heap if it is in it.
func (h *minHeap[T]) unschedule(e T) {
	if i := *e.index(); i >= 0 {
		heap.Remove(h, i)
	}
}

// topicHeap orders topics by the time their next message is due.
type topicHeap = minHeap[*topic]

func (t *topic) heapKey() int64     { return t.next }
func (t *topic) setHeapKey(v int64) { t.next = v }
func (t *topic) index() *int        { return &t.idx }

// flightHeap orders in-flight messages by deadline.
type flightHeap = minHeap[*flight]

func (f *flight) heapKey() int64     { return f.deadline }
func (f *flight) setHeapKey(v int64) { f.deadline = v }
func (f *flight) index() *int        { return &f.idx }
