package policy

import (
	"container/list"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// DefaultMaxBuckets bounds the rate limit buckets kept at once. Subjects
// come from callers (every OIDC subject, and for rate "glob" blocks every
// subject and name, has its own bucket), so the map of buckets is an LRU:
// past the bound the bucket used longest ago is dropped, and its caller
// starts again with a full burst (docs/security.md).
const DefaultMaxBuckets = 10000

// Limiters holds the token buckets of the policies' rate blocks, one per
// policy, rate block, subject (and name, for a labelled block). It is
// safe for concurrent use and may outlive the Engines that share it.
type Limiters struct {
	max int

	mu      sync.Mutex
	buckets map[bucketKey]*list.Element // of *bucket
	lru     list.List                   // front: used most recently
}

type bucketKey struct {
	policy  string
	subject string
	rate    config.Rate // a reload that changes the rate gets a new bucket
	name    string      // kind:name for a labelled rate block
}

type bucket struct {
	key bucketKey
	lim *rate.Limiter
}

// NewLimiters returns an empty set holding at most max buckets
// (DefaultMaxBuckets when max <= 0).
func NewLimiters(max int) *Limiters {
	if max <= 0 {
		max = DefaultMaxBuckets
	}
	return &Limiters{max: max, buckets: map[bucketKey]*list.Element{}}
}

// Len is how many buckets are held.
func (l *Limiters) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// take takes one token from every bucket of keys at now if each has one,
// and returns -1; otherwise it takes none and returns the index of the
// bucket with the longest wait, and that wait.
func (l *Limiters) take(keys []bucketKey, now time.Time) (int, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rs := make([]*rate.Reservation, len(keys))
	worst, wait := -1, time.Duration(0)
	for i, k := range keys {
		rs[i] = l.get(k).ReserveN(now, 1)
		if d := rs[i].DelayFrom(now); d > 0 && d > wait {
			worst, wait = i, d
		}
	}
	if worst >= 0 {
		for _, r := range rs {
			r.CancelAt(now)
		}
	}
	return worst, wait
}

// get returns the limiter of k, making it (and evicting the least
// recently used past max) when there is none. l.mu must be held.
func (l *Limiters) get(k bucketKey) *rate.Limiter {
	if el, ok := l.buckets[k]; ok {
		l.lru.MoveToFront(el)
		return el.Value.(*bucket).lim
	}
	for len(l.buckets) >= l.max {
		old := l.lru.Back()
		l.lru.Remove(old)
		delete(l.buckets, old.Value.(*bucket).key)
	}
	b := &bucket{key: k, lim: rate.NewLimiter(rate.Limit(float64(k.rate.CallsPerMinute)/60), k.rate.BurstOrDefault())}
	l.buckets[k] = l.lru.PushFront(b)
	return b.lim
}
