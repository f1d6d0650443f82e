package index

import (
	"fmt"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"
)

// followEvery is how often the embedded Redis catches up with the clock. It is a polling
// period of this process, not a reading of time, so it uses a real ticker even when clk is
// fake; Sync catches up at once.
const followEvery = 50 * time.Millisecond

// Embedded is an in-process Redis (miniredis) for embedded mode and tests. miniredis only
// expires keys when told that time moved, so Embedded moves its time to clk every 50 ms: lock
// TTLs and slice expiry behave as on a real Redis, in real or virtual time.
type Embedded struct {
	m   *miniredis.Miniredis
	clk clockwork.Clock
	rdb redis.UniversalClient

	mu   sync.Mutex
	last time.Time // the latest time given to miniredis; it never moves back

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// NewEmbedded starts a miniredis on a free loopback port whose TTLs follow clk.
func NewEmbedded(clk clockwork.Clock) (*Embedded, error) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		return nil, fmt.Errorf("index: start embedded redis: %w", err)
	}
	// ClockTTL: TTLs shrink as the time given by SetTime advances, and EXPIREAT/TIME agree.
	m.ClockTTL(true)
	e := &Embedded{
		m:    m,
		clk:  clk,
		rdb:  redis.NewClient(&redis.Options{Addr: m.Addr()}),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	e.Sync()
	go e.follow()
	return e, nil
}

// Client is the embedded Redis's client; Close closes it.
func (e *Embedded) Client() redis.UniversalClient { return e.rdb }

// Addr is the loopback address miniredis listens on.
func (e *Embedded) Addr() string { return e.m.Addr() }

// Miniredis exposes the server, for tests that flush or inspect it.
func (e *Embedded) Miniredis() *miniredis.Miniredis { return e.m }

// Sync moves miniredis's time to clk.Now() at once, expiring the keys whose TTL ran out. Time
// never moves back: a clock that steps back leaves miniredis where it was until the clock
// catches up.
func (e *Embedded) Sync() {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.clk.Now()
	if !now.After(e.last) {
		return
	}
	e.last = now
	e.m.SetTime(now)
	// A forward jump is applied by miniredis on its next database access; touch it now so the
	// expired keys are gone when Sync returns.
	_ = e.m.DB(0)
}

func (e *Embedded) follow() {
	defer close(e.done)
	tick := time.NewTicker(followEvery)
	defer tick.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-tick.C:
			e.Sync()
		}
	}
}

// Close stops following the clock and closes the client and the server. Idempotent.
func (e *Embedded) Close() {
	e.once.Do(func() {
		close(e.stop)
		<-e.done
		_ = e.rdb.Close()
		e.m.Close()
	})
}
