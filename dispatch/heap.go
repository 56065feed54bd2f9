package dispatch

// heapElem is what minHeap orders: a time key, and the element's own index
// in the heap so it can be moved or removed without a search.
type heapElem interface {
	heapKey() int64
	setHeapKey(int64)
	index() *int // -1 when not in a heap
}

// minHeap orders elements by key, earliest first. The zero value is empty.
//
// NB: it sifts by itself rather than through container/heap, whose
// heap.Interface put two indirect calls in every comparison and swap: the
// timer heap's moves on each delivery and each ACK were 3% of the serve
// process in the end-to-end bench. The algorithm is container/heap's.
type minHeap[T heapElem] []T

func (h minHeap[T]) less(i, j int) bool { return h[i].heapKey() < h[j].heapKey() }

func (h minHeap[T]) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	*h[i].index(), *h[j].index() = i, j
}

// up moves the element at j towards the root while it is earlier than
// its parent.
func (h minHeap[T]) up(j int) {
	for j > 0 {
		i := (j - 1) / 2 // parent
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

// down moves the element at i0 towards the leaves, among the first n,
// while a child is earlier; it reports whether it moved.
func (h minHeap[T]) down(i0, n int) bool {
	i := i0
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 { // j1 < 0 after int overflow
			break
		}
		j := j1 // left child
		if j2 := j1 + 1; j2 < n && h.less(j2, j1) {
			j = j2 // right child
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

// fix restores the order after the key of the element at i changed.
func (h minHeap[T]) fix(i int) {
	if !h.down(i, len(h)) {
		h.up(i)
	}
}

// schedule sets e's key and puts it in the heap, or moves it there.
func (h *minHeap[T]) schedule(e T, key int64) {
	e.setHeapKey(key)
	if i := *e.index(); i >= 0 {
		h.fix(i)
		return
	}
	*e.index() = len(*h)
	*h = append(*h, e)
	h.up(len(*h) - 1)
}

// unschedule takes e out of the heap if it is in it.
func (h *minHeap[T]) unschedule(e T) {
	i := *e.index()
	if i < 0 {
		return
	}
	old := *h
	n := len(old) - 1
	if n != i {
		old.swap(i, n)
		if !old[:n].down(i, n) {
			old[:n].up(i)
		}
	}
	var zero T
	old[n] = zero
	*h = old[:n]
	*e.index() = -1
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
