package agent

import (
	"context"
	"reflect"
	"slices"
	"time"

	"github.com/eip-project/eip/internal/endpoints"
	"github.com/eip-project/eip/internal/netif"
)

// The loop's inputs, in one table that both its wait (run) and its drain
// read: what each input is for is said once, in handle.
const (
	inDone  = iota // the context ended: shut down
	inTimer        // a time the schedule set came
	inTick
	inServices
	inNodes
	inLeases
	inHeartbeats
	inConfigMap
	inEndpoints
	inRenewed
	inWritten
	inAllocated
	inAddress
	inLink
	inClaim
	inDatagrams
	inProxied
	nInputs
)

// inputs is the table of the loop's input channels: all of them for the
// wait, and for the drain those from the tick on, then a default.
type inputs struct {
	cases, drain []reflect.SelectCase
}

func (s *state) newInputs(ctx context.Context, tick, timer <-chan time.Time) *inputs {
	in := &inputs{cases: make([]reflect.SelectCase, nInputs)}
	for i, ch := range map[int]any{
		inDone: ctx.Done(), inTimer: timer, inTick: tick,
		inServices: s.a.svcKick, inNodes: s.a.nodeKick, inLeases: s.a.leaseKick, inHeartbeats: s.a.hbKick, inConfigMap: s.a.cmKick,
		inEndpoints: s.a.epKick,
		inRenewed:   s.renewRes, inWritten: s.writes.results, inAllocated: s.alloc.results,
		inAddress: s.a.opt.AddrEvents, inLink: s.a.opt.LinkEvents, inClaim: s.binder.claims, inDatagrams: s.lan.speaker.kick,
		inProxied: s.serving.proxied,
	} {
		in.cases[i] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)}
	}
	in.drain = append(slices.Clone(in.cases[inTick:]), reflect.SelectCase{Dir: reflect.SelectDefault})
	return in
}

// setTick points the tick input at a new ticker's channel.
func (in *inputs) setTick(tick <-chan time.Time) {
	in.cases[inTick].Chan = reflect.ValueOf(tick)
	in.drain[0].Chan = in.cases[inTick].Chan
}

// wait blocks until an input comes, and returns it.
func (in *inputs) wait() (int, reflect.Value) {
	i, v, _ := reflect.Select(in.cases)
	return i, v
}

// waiting returns an input that is already there, if one is, without
// blocking; neither the end of the context nor the timer, which only the
// wait answers.
func (in *inputs) waiting() (int, reflect.Value, bool) {
	i, v, _ := reflect.Select(in.drain)
	if i == len(in.drain)-1 {
		return 0, reflect.Value{}, false
	}
	return i + inTick, v, true
}

// handle answers input i, received as v, and says whether it asks for a
// pass now. While draining, a pass follows in any case, and a heartbeat's
// renewal is only noted for it.
func (s *state) handle(i int, v reflect.Value, draining bool) (pass bool) {
	now := s.clk.Now
	switch i {
	case inTimer:
		s.wire.check(now(), s.self.apiOK(now()), s.live, &s.binder)
		s.reannounce(now())
		return s.checkUnheard(now()) || s.passDue(now())
	case inTick:
		s.tick()
		return s.passDue(now())
	case inServices, inNodes, inConfigMap, inEndpoints:
		s.sched.inputChanged(i)
	case inLeases:
	case inHeartbeats:
		s.wire.requested(now())
		if draining {
			s.sched.inputChanged(i)
			return true
		}
		return s.heartbeatEvent()
	case inRenewed:
		s.renewed(v.Interface().(renewResult))
		return s.passDue(now())
	case inWritten:
		s.writeDone(v.Interface().(writeResult))
	case inAllocated:
		r := v.Interface().(allocResult)
		s.sched.askFull()
		s.book.created(r.created)
		s.alloc.done(r, &s.desired, now())
	case inAddress:
		// It restores what it can at once; what a late loop may not,
		// its next tick on time decides again (lateBinds).
		s.addrEvent(v.Interface().(netif.AddrEvent))
		return false
	case inLink:
		s.linkEvent(v.Interface().(netif.LinkEvent))
	case inClaim:
		return s.claim(v.Interface().(netif.Claim))
	case inDatagrams:
		return s.takeDatagrams()
	case inProxied:
		if !s.serving.verdict(v.Interface().(endpoints.Result)) {
			return false
		}
		s.sched.inputChanged(inEndpoints)
	}
	return true
}
