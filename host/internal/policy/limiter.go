package policy

import (
	"container/list"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/mcpvisor/mcpvisor/host/config"
)

/*
Design note: whose buckets.

A rate block is one token bucket per subject: `rate { … }` counts every
call of the subject, `rate "glob" { … }` every call of the subject to any
name the glob matches, summed — not one bucket per name, so a caller
cannot multiply a rate by spreading its calls over many URIs or tools.

The buckets are held per subject (identity.Subject.Caller). A subject has
one bucket per rate block that applies to it, so its own set is small; it
is bounded anyway (maxBucketsPerSubject, the least recently used dropped
first: only a reload that changes rates leaves old buckets behind). The
subjects are an LRU of at most DefaultMaxSubjects: past it the subject
whose buckets were used longest ago loses them and starts again full. A
subject's calls only ever touch its own set, so no call of one subject
can drop or refill another's buckets; only as many other subjects as the
cap, each with a verified token of its own, can push a subject out.
*/

// DefaultMaxSubjects bounds the subjects whose rate limit buckets are kept
// at once (docs/security.md).
const DefaultMaxSubjects = 10000

// maxBucketsPerSubject bounds one subject's buckets: one per rate block
// that applies to it, plus those a reload that changed the rates left.
const maxBucketsPerSubject = 64

// Limiters holds the token buckets of the policies' rate blocks, one per
// subject and rate block. It is safe for concurrent use and may outlive
// the Engines that share it.
type Limiters struct {
	maxSubjects int

	mu       sync.Mutex               // guards the fields below
	subjects map[string]*list.Element // of *subjectBuckets, by Subject.Caller
	lru      list.List                // front: used most recently
}

// subjectBuckets are one subject's buckets.
type subjectBuckets struct {
	subject string
	buckets map[bucketKey]*list.Element // of *bucket
	lru     list.List                   // front: used most recently
}

type bucketKey struct {
	policy string
	rate   config.Rate // its glob, rate and burst: a reload that changes it gets a new bucket
}

type bucket struct {
	key bucketKey
	lim *rate.Limiter
}

// NewLimiters returns an empty set keeping the buckets of at most
// maxSubjects subjects (DefaultMaxSubjects when maxSubjects <= 0).
func NewLimiters(maxSubjects int) *Limiters {
	if maxSubjects <= 0 {
		maxSubjects = DefaultMaxSubjects
	}
	return &Limiters{maxSubjects: maxSubjects, subjects: map[string]*list.Element{}}
}

// Len is how many buckets are held, over every subject.
func (l *Limiters) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, el := range l.subjects {
		n += len(el.Value.(*subjectBuckets).buckets)
	}
	return n
}

// take takes one token from every bucket of subject's keys at now if each
// has one, and returns -1; otherwise it takes none and returns the index
// of the bucket with the longest wait, and that wait.
func (l *Limiters) take(subject string, keys []bucketKey, now time.Time) (int, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sb := l.subjectOf(subject)
	rs := make([]*rate.Reservation, len(keys))
	worst, wait := -1, time.Duration(0)
	for i, k := range keys {
		rs[i] = sb.get(k).ReserveN(now, 1)
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

// subjectOf returns subject's buckets, making them (and dropping the
// subject used longest ago past the cap) when there are none. l.mu must
// be held.
func (l *Limiters) subjectOf(subject string) *subjectBuckets {
	if el, ok := l.subjects[subject]; ok {
		l.lru.MoveToFront(el)
		return el.Value.(*subjectBuckets)
	}
	for len(l.subjects) >= l.maxSubjects {
		old := l.lru.Back()
		l.lru.Remove(old)
		delete(l.subjects, old.Value.(*subjectBuckets).subject)
	}
	sb := &subjectBuckets{subject: subject, buckets: map[bucketKey]*list.Element{}}
	l.subjects[subject] = l.lru.PushFront(sb)
	return sb
}

// get returns the limiter of k, making it (and dropping the subject's
// bucket used longest ago past maxBucketsPerSubject) when there is none.
func (sb *subjectBuckets) get(k bucketKey) *rate.Limiter {
	if el, ok := sb.buckets[k]; ok {
		sb.lru.MoveToFront(el)
		return el.Value.(*bucket).lim
	}
	for len(sb.buckets) >= maxBucketsPerSubject {
		old := sb.lru.Back()
		sb.lru.Remove(old)
		delete(sb.buckets, old.Value.(*bucket).key)
	}
	b := &bucket{key: k, lim: rate.NewLimiter(rate.Limit(float64(k.rate.CallsPerMinute)/60), k.rate.BurstOrDefault())}
	sb.buckets[k] = sb.lru.PushFront(b)
	return b.lim
}
