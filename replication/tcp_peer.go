package replication

import (
	"net"

	"go.etcd.io/raft/v3/raftpb"
)

// outbound is one queued message.
type outbound struct {
	group GroupID
	msg   raftpb.Message
}

// tcpPeer sends to one peer: a bounded queue and the goroutine that drains
// it into the peer's connection.
type tcpPeer struct {
	t        *TCPTransport
	id       NodeID
	queue    chan outbound
	redialCh chan struct{} // the address changed
}

func (p *tcpPeer) redial() {
	select {
	case p.redialCh <- struct{}{}:
	default:
	}
}

// run connects, writes until the connection fails, and reconnects with
// exponential back-off; while it cannot connect, queued messages are dropped
// and reported, so that Raft probes instead of pipelining into the void.
func (p *tcpPeer) run() {
	t := p.t
	defer t.wg.Done()
	backoff := backoffMin
	for t.ctx.Err() == nil {
		c, err := t.dial(p.id, streamMessages)
		if err != nil {
			p.dropQueued()
			if !t.sleep(backoff, p.redialCh) {
				return
			}
			backoff = min(2*backoff, backoffMax)
			continue
		}
		backoff = backoffMin
		err = p.write(c)
		t.untrack(c)
		if err != nil && t.ctx.Err() == nil {
			t.log.Debug("raft transport: connection to peer lost", "peer", p.id, "err", err)
		}
	}
}

// write drains the queue into c, one vectored write per batch of whatever is
// queued (up to writeBatchSize bytes), until an error or a redial.
func (p *tcpPeer) write(c net.Conn) error {
	t := p.t
	var batch frameBatch
	var sent []outbound // the batch, to report if its write fails
	w := newBatchWriter(c)
	for {
		var ob outbound
		select {
		case <-t.ctx.Done():
			return nil
		case <-p.redialCh:
			return nil
		case ob = <-p.queue:
		}
		sent = append(sent[:0], ob)
		err := batch.add(ob.group, &ob.msg)
		for more := true; more && err == nil && len(sent) < cap(p.queue) && batch.size() < writeBatchSize; {
			select {
			case ob = <-p.queue:
				sent = append(sent, ob)
				err = batch.add(ob.group, &ob.msg)
			default:
				more = false
			}
		}
		if err == nil {
			_ = c.SetWriteDeadline(t.clock.Now().Add(writeTimeout))
			err = batch.writeTo(w.w)
		}
		if err == nil {
			err = w.flush()
		}
		if err != nil {
			p.report(sent)
			return err
		}
		clear(sent)
	}
}

// dropQueued empties the queue, reporting each group once.
func (p *tcpPeer) dropQueued() {
	var dropped []outbound
	for {
		select {
		case ob := <-p.queue:
			dropped = append(dropped, ob)
		default:
			p.report(dropped)
			return
		}
	}
}

func (p *tcpPeer) report(lost []outbound) {
	seen := make(map[GroupID]struct{}, 4)
	for _, ob := range lost {
		if _, ok := seen[ob.group]; !ok {
			seen[ob.group] = struct{}{}
			p.t.handler.ReportUnreachable(p.id, ob.group)
		}
	}
}
