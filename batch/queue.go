package batch

import (
	"sync"

	"github.com/tockd/tock/dao"
)

// queue is the bounded queue between the dispatcher and the workers. It remembers the task
// ids queued or being worked on here, so a task is never queued twice: the seed checked the
// set and sent on the channel in separate critical sections (two producers could both queue a
// task) and forgot an id as soon as a worker took it (a scan could queue it again while it
// ran). Here push checks the set and the room under one lock and never blocks, and an id
// leaves the set only when its worker is done.
type queue struct {
	ch chan dao.BatchTask

	mu  sync.Mutex
	ids map[int64]struct{}
}

type pushResult int

const (
	pushed pushResult = iota
	duplicate
	full
)

func newQueue(size int) *queue {
	return &queue{ch: make(chan dao.BatchTask, size), ids: make(map[int64]struct{}, size)}
}

// push queues task r (as read by the dispatcher) unless it is queued or running here already, or the queue is full.
func (q *queue) push(r dao.BatchTask) pushResult {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.ids[r.ID]; ok {
		return duplicate
	}
	if len(q.ch) == cap(q.ch) {
		return full
	}
	q.ids[r.ID] = struct{}{}
	q.ch <- r // cannot block: room checked under the lock, and only push sends
	return pushed
}

// done forgets a task its worker finished with.
func (q *queue) done(id int64) {
	q.mu.Lock()
	delete(q.ids, id)
	q.mu.Unlock()
}

func (q *queue) len() int { return len(q.ch) }
func (q *queue) cap() int { return cap(q.ch) }

// free is how many more tasks fit.
func (q *queue) free() int { return cap(q.ch) - len(q.ch) }
