package kinesistest

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

const maxConsumers = 20

// consumer is one registered enhanced fan-out consumer. The Server's mutex guards it.
type consumer struct {
	name     string
	arn      string
	created  time.Time
	status   string
	settleAt time.Time
	subs     map[int]*subscription // by shard index: the live subscription, if any
	lastCall map[int]time.Time     // by shard index: the last SubscribeToShard call
}

// subscription is one SubscribeToShard call's stream of events.
type subscription struct {
	started time.Time
	ended   chan struct{}   // closed to end the subscription
	gone    <-chan struct{} // closed when the client reset or closed the call's stream
	once    sync.Once
}

func (sub *subscription) end() { sub.once.Do(func() { close(sub.ended) }) }

func (c *consumer) endSubscriptions() {
	for _, sub := range c.subs {
		sub.end()
	}
}

var consumerNameRE = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,128}$`)

type consumerJSON struct {
	ConsumerName              string
	ConsumerARN               string
	ConsumerStatus            string
	ConsumerCreationTimestamp epochSeconds
	StreamARN                 string `json:",omitempty"`
}

func (c *consumer) json(streamARN string) consumerJSON {
	return consumerJSON{c.name, c.arn, c.status, epochSeconds(c.created), streamARN}
}

// findConsumer finds a consumer by its ARN, or by its stream's ARN and its name; the caller
// holds s.mu.
func (s *Server) findConsumer(consumerARN, streamARN, name string) (*stream, *consumer, *apiError) {
	if consumerARN != "" {
		i := strings.Index(consumerARN, "/consumer/")
		j := strings.LastIndexByte(consumerARN, ':')
		if i < 0 || j < i {
			return nil, nil, errInvalid("ConsumerARN %q is not a consumer ARN.", consumerARN)
		}
		streamARN, name = consumerARN[:i], consumerARN[i+len("/consumer/"):j]
	}
	if streamARN == "" || name == "" {
		return nil, nil, errInvalid("Give a ConsumerARN, or a StreamARN and a ConsumerName.")
	}
	st, err := s.lookup("", streamARN)
	if err != nil {
		return nil, nil, err
	}
	c, ok := st.consumers[name]
	if !ok || consumerARN != "" && c.arn != consumerARN {
		return nil, nil, errNotFound("Consumer %s under stream %s not found.", name, st.arn)
	}
	return st, c, nil
}

func (s *Server) registerConsumer(body []byte) (any, *apiError) {
	var in struct{ StreamARN, ConsumerName string }
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	if !consumerNameRE.MatchString(in.ConsumerName) {
		return nil, errValidation("1 validation error detected: Value '%s' at 'consumerName' failed to satisfy constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9_.-]+ and have length 1 to 128", in.ConsumerName)
	}
	if in.StreamARN == "" {
		return nil, errValidation("1 validation error detected: Value null at 'streamARN' failed to satisfy constraint: Member must not be null")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.lookup("", in.StreamARN)
	if err != nil {
		return nil, err
	}
	if _, ok := st.consumers[in.ConsumerName]; ok {
		return nil, errInUse("Consumer %s under stream %s already exists.", in.ConsumerName, st.arn)
	}
	if len(st.consumers) >= maxConsumers {
		return nil, errLimit("Stream %s already has %d registered consumers, the most it may have.", st.arn, maxConsumers)
	}
	now := s.now()
	c := &consumer{
		name:     in.ConsumerName,
		arn:      fmt.Sprintf("%s/consumer/%s:%d", st.arn, in.ConsumerName, now.Unix()),
		created:  now,
		status:   statusCreating,
		settleAt: now.Add(s.cfg.statusDelay),
		subs:     make(map[int]*subscription),
		lastCall: make(map[int]time.Time),
	}
	st.consumers[c.name] = c
	return struct{ Consumer consumerJSON }{c.json("")}, nil
}

func (s *Server) describeConsumer(body []byte) (any, *apiError) {
	var in struct{ StreamARN, ConsumerName, ConsumerARN string }
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, c, err := s.findConsumer(in.ConsumerARN, in.StreamARN, in.ConsumerName)
	if err != nil {
		return nil, err
	}
	return struct{ ConsumerDescription consumerJSON }{c.json(st.arn)}, nil
}

func (s *Server) listConsumers(body []byte) (any, *apiError) {
	var in struct {
		StreamARN  string
		NextToken  string
		MaxResults *int
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	max, verr := pageSize(in.MaxResults, "maxResults", 100, 10000)
	if verr != nil {
		return nil, verr
	}
	skip := 0
	if in.NextToken != "" {
		n, err := strconv.Atoi(in.NextToken)
		if err != nil || n < 0 {
			return nil, errInvalid("Invalid NextToken.")
		}
		skip = n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.lookup("", in.StreamARN)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(st.consumers))
	for name := range st.consumers {
		names = append(names, name)
	}
	slices.Sort(names)
	out := struct {
		Consumers []consumerJSON
		NextToken string `json:",omitempty"`
	}{Consumers: []consumerJSON{}}
	for i := skip; i < len(names); i++ {
		if len(out.Consumers) == max {
			out.NextToken = strconv.Itoa(i)
			break
		}
		out.Consumers = append(out.Consumers, st.consumers[names[i]].json(""))
	}
	return out, nil
}

func (s *Server) deregisterConsumer(body []byte) (any, *apiError) {
	var in struct{ StreamARN, ConsumerName, ConsumerARN string }
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, c, err := s.findConsumer(in.ConsumerARN, in.StreamARN, in.ConsumerName)
	if err != nil {
		return nil, err
	}
	now := s.now()
	c.status, c.settleAt = statusDeleting, now.Add(s.cfg.statusDelay)
	c.endSubscriptions()
	s.settle(st, now)
	return struct{}{}, nil
}
