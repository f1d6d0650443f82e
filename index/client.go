package index

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tockd/tock/conf"
)

// NewClient connects to the configured Redis: Sentinel when master_name is set, Cluster when
// several addresses are given, a single server otherwise. It does not dial until first use.
func NewClient(c conf.Redis) redis.UniversalClient {
	return redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:      c.Addr,
		MasterName: c.MasterName,
		Username:   c.Username,
		Password:   c.Password,
		DB:         c.DB,
	})
}

// Instrument counts rdb's failed commands in tock_redis_errors_total on r, labelled by
// command name (lowercase; the set tock's code sends, so bounded) or "pipeline" for a
// pipeline, counted once. A miss (redis.Nil), the NOSCRIPT answer after which go-redis sends
// a script's body, a cancelled context (shutdown) and the connection set-up commands whose
// errors go-redis tolerates are not errors. Instrumenting several clients on one registry
// shares the counter; instrument each client once.
func Instrument(rdb redis.UniversalClient, r prometheus.Registerer) error {
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tock_redis_errors_total",
		Help: "Redis commands that failed, by command (pipeline: a pipeline with any failed command).",
	}, []string{"command"})
	if err := r.Register(errs); err != nil {
		var are prometheus.AlreadyRegisteredError
		existing, ok := errs, false
		if errors.As(err, &are) {
			existing, ok = are.ExistingCollector.(*prometheus.CounterVec)
		}
		if !ok {
			return fmt.Errorf("index: register redis metrics: %w", err)
		}
		errs = existing
	}
	rdb.AddHook(errorHook{errs: errs})
	return nil
}

// errorHook is the go-redis hook behind Instrument.
type errorHook struct{ errs *prometheus.CounterVec }

// setup are the commands go-redis sends through the hooks when it opens a connection, whose
// errors it tolerates (HELLO or CLIENT SETINFO unknown to an older server or to the
// embedded miniredis); tock never sends them itself. A connection that really cannot be set
// up fails the command that needed it, which is counted.
var setup = map[string]bool{"hello": true, "auth": true, "client": true, "select": true}

// failed reports whether cmd failed on Redis or on the connection to it.
func failed(cmd redis.Cmder, err error) bool {
	return err != nil && !errors.Is(err, redis.Nil) && !redis.HasErrorPrefix(err, "NOSCRIPT") &&
		!errors.Is(err, context.Canceled) && !setup[cmd.Name()]
}

func (h errorHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h errorHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if failed(cmd, err) {
			h.errs.WithLabelValues(cmd.Name()).Inc()
		}
		return err
	}
}

func (h errorHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		bad := false
		for _, c := range cmds {
			bad = bad || failed(c, c.Err())
		}
		if bad {
			h.errs.WithLabelValues("pipeline").Inc()
		}
		return err
	}
}
