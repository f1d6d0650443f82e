package index

import (
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
