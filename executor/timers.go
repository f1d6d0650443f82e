package executor

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/schedule"
)

// Timer definitions. Every occurrence needs its timer's current definition (enabled? does
// its schedule have this time?) before the claim. Timers change rarely and fire often, so
// the executor keeps parsed definitions for a while: the claim itself checks the version it
// was decided on, so a stale definition costs one more read, never a wrong call; and a
// cached definition is only trusted to say "fire", a "skip" is confirmed on the store.

// timerCacheMax bounds the cache; when full it starts over (a burst of reads, no leak).
const timerCacheMax = 200_000

type cachedTimer struct {
	def
	at time.Time
}

// def is a timer as the executor decides on it.
type def struct {
	t        dao.Timer
	sched    schedule.Schedule // nil when the timer is gone, not enabled or does not parse
	gone     bool              // deleted
	badSched bool
	cached   bool // from the cache, not read for this occurrence
}

// refuses says why occ must not fire under d, or "".
func (d def) refuses(occ Occurrence) string {
	switch {
	case d.gone:
		return "timer deleted"
	case d.t.Status != dao.StatusEnabled:
		return "timer " + d.t.Status
	case d.badSched:
		return "invalid schedule"
	case !schedule.Has(d.sched, time.UnixMilli(occ.ScheduledMS)):
		return "not an occurrence of the timer's current schedule"
	}
	return ""
}

type timerCache struct {
	mu  sync.Mutex
	m   map[int64]cachedTimer
	ttl time.Duration
}

// definition returns timer id's definition: cached when fresh is false and a recent one is
// at hand, else read from the store (and cached when the timer is enabled).
func (e *Executor) definition(ctx context.Context, id int64, fresh bool) (def, error) {
	c := &e.timers
	now := e.clk.Now()
	if !fresh && c.ttl > 0 {
		c.mu.Lock()
		ct, ok := c.m[id]
		c.mu.Unlock()
		if ok && now.Sub(ct.at) < c.ttl {
			d := ct.def
			d.cached = true
			return d, nil
		}
	}
	t, err := e.store.GetTimer(ctx, id)
	if errors.Is(err, dao.ErrNotFound) {
		c.forget(id)
		return def{gone: true}, nil
	}
	if err != nil {
		return def{}, err
	}
	d := def{t: t}
	if t.Status == dao.StatusEnabled {
		d.sched, err = schedule.Parse(schedule.Spec(t.Schedule), time.UnixMilli(t.AnchorMS))
		if err != nil {
			e.log.Error("stored schedule does not parse", "timer_id", t.ID, "err", err)
			d.badSched = true
		}
	}
	if c.ttl > 0 && d.sched != nil {
		c.mu.Lock()
		if len(c.m) >= timerCacheMax {
			clear(c.m)
		}
		c.m[id] = cachedTimer{def: d, at: now}
		c.mu.Unlock()
	} else {
		c.forget(id)
	}
	return d, nil
}

func (c *timerCache) forget(id int64) {
	c.mu.Lock()
	delete(c.m, id)
	c.mu.Unlock()
}

// claim claims occ for this instance at the version t was decided on.
func (e *Executor) claim(ctx context.Context, occ Occurrence, t dao.Timer) (dao.Execution, bool, error) {
	return e.store.ClaimExecution(ctx, dao.ClaimParams{
		TimerID:      occ.TimerID,
		ScheduledMS:  occ.ScheduledMS,
		TimerVersion: t.Version,
		Owner:        e.cfg.InstanceID,
		NowMS:        e.clk.Now().UnixMilli(),
	})
}
