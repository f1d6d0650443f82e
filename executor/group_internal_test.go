package executor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tockd/tock/dao"
)

// Requests made while a group is being written go out together in the next one, each
// caller gets its own result, and no group exceeds max.
func TestCoalescerGroupsConcurrentRequests(t *testing.T) {
	release := make(chan struct{})
	var calls, biggest atomic.Int64
	c := newCoalescer(50, func(_ context.Context, qs []int) ([]int, error) {
		if calls.Add(1) <= groupWriters {
			<-release // hold every writer so the rest pile up
		}
		if int64(len(qs)) > biggest.Load() {
			biggest.Store(int64(len(qs)))
		}
		out := make([]int, len(qs))
		for i, q := range qs {
			out[i] = q * 2
		}
		return out, nil
	})
	defer c.stop()
	const n = 400
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.do(context.Background(), i)
			if err != nil || r != 2*i {
				errs <- errors.New("wrong result")
			}
		}()
	}
	// Let the callers queue behind the held writers (bounded wait), then release them.
	deadline := time.Now().Add(5 * time.Second)
	for calls.Load() < groupWriters && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if calls.Load() >= n || biggest.Load() < 2 || biggest.Load() > 50 {
		t.Fatalf("%d groups for %d requests, biggest %d: want real groups of at most 50", calls.Load(), n, biggest.Load())
	}
	t.Logf("%d requests in %d groups, biggest %d", n, calls.Load(), biggest.Load())
}

func TestCoalescerErrorsAndCancel(t *testing.T) {
	boom := errors.New("boom")
	block := make(chan struct{})
	c := newCoalescer(10, func(_ context.Context, qs []int) ([]int, error) {
		if qs[0] == 7 {
			<-block
		}
		return nil, boom
	})
	if _, err := c.do(context.Background(), 1); !errors.Is(err, boom) {
		t.Fatalf("group error: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.do(ctx, 7); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled caller: %v", err)
	}
	close(block)
	c.stop()
	if _, err := c.do(context.Background(), 1); !errors.Is(err, ErrStopped) {
		t.Fatalf("after stop: %v", err)
	}
}

type claimRecorder struct {
	GroupStore
	got [][]dao.ClaimParams
}

func (r *claimRecorder) ClaimExecutions(_ context.Context, ps []dao.ClaimParams) ([]dao.ClaimResult, error) {
	r.got = append(r.got, ps)
	out := make([]dao.ClaimResult, len(ps))
	for i, p := range ps {
		out[i] = dao.ClaimResult{Existing: dao.Execution{ID: int64(i + 1), TimerID: p.TimerID, ScheduledMS: p.ScheduledMS}, Claimed: true}
	}
	return out, nil
}

// A group claims at one instant, and the same occurrence twice in it is claimed once.
func TestClaimGroupOneInstantNoDoubleClaim(t *testing.T) {
	r := &claimRecorder{}
	ps := []dao.ClaimParams{
		{TimerID: 1, ScheduledMS: 10, Owner: "me", NowMS: 100},
		{TimerID: 2, ScheduledMS: 10, Owner: "me", NowMS: 103},
		{TimerID: 1, ScheduledMS: 10, Owner: "me", NowMS: 104},
	}
	rs, err := claimGroup(context.Background(), r, ps)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.got) != 1 || len(r.got[0]) != 2 || r.got[0][0].NowMS != 104 || r.got[0][1].NowMS != 104 {
		t.Fatalf("sent %+v: want two claims at 104", r.got)
	}
	if !rs[0].Claimed || !rs[1].Claimed || rs[2].Claimed || rs[2].Existing.ID != rs[0].Existing.ID {
		t.Fatalf("results %+v: the duplicate must come back unclaimed with the same row", rs)
	}
	if _, err := claimGroup(context.Background(), r, []dao.ClaimParams{{Owner: "a"}, {Owner: "b"}}); err == nil {
		t.Fatal("two owners in one group must fail")
	}
}
