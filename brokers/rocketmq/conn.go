package rocketmq

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"
)

// A remoting frame is [total length][serialize type<<24 | header
// length][header][body], big endian, with a JSON header (serialize type
// 0). Flag bit 0 marks a response, bit 1 a one-way request.
const (
	flagResponse = 1
	flagOneway   = 2
	// maxFrame bounds what a peer may make us allocate.
	maxFrame = 64 << 20
	// codeNotSupported answers a server request the driver does not serve
	// (REQUEST_CODE_NOT_SUPPORTED).
	codeNotSupported = 3
)

// frame is one remoting command.
type frame struct {
	remotingHeader
	body []byte
}

func writeFrame(w io.Writer, h remotingHeader, body []byte) error {
	hb, err := json.Marshal(h)
	if err != nil {
		return err
	}
	buf := make([]byte, 8, 8+len(hb)+len(body))
	binary.BigEndian.PutUint32(buf[0:4], uint32(4+len(hb)+len(body)))
	binary.BigEndian.PutUint32(buf[4:8], uint32(len(hb))) // serialize type 0 = JSON
	buf = append(append(buf, hb...), body...)
	_, err = w.Write(buf)
	return err
}

func readFrame(r io.Reader) (frame, error) {
	var pre [8]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return frame{}, err
	}
	total := binary.BigEndian.Uint32(pre[0:4])
	hlen := binary.BigEndian.Uint32(pre[4:8]) & 0xFFFFFF
	if total > maxFrame { // checked before anything is allocated for it
		return frame{}, fmt.Errorf("remoting frame of %d bytes refused: over the driver's limit of %d MiB (a peer that does not speak RocketMQ's remoting protocol, or a corrupt stream)", total, maxFrame>>20)
	}
	if total < 4+hlen {
		return frame{}, fmt.Errorf("bad remoting frame (length %d, header %d)", total, hlen)
	}
	if pre[4] != 0 {
		return frame{}, fmt.Errorf("unsupported remoting serialize type %d", pre[4])
	}
	rest := make([]byte, total-4)
	if _, err := io.ReadFull(r, rest); err != nil {
		return frame{}, err
	}
	var f frame
	if err := json.Unmarshal(rest[:hlen], &f.remotingHeader); err != nil {
		return frame{}, fmt.Errorf("remoting header: %w", err)
	}
	f.body = rest[hlen:]
	return f, nil
}

// conn is one multiplexed remoting connection: any number of requests in
// flight, matched to their responses by opaque. Requests from the server
// (a broker telling the group's consumers that membership changed) go to
// onRequest. A read or write error closes it for good; callers dial anew.
type conn struct {
	addr      string
	nc        net.Conn
	onRequest func(code int, ext map[string]string)

	wmu sync.Mutex // one frame at a time on the wire

	mu       sync.Mutex
	pending  map[int32]chan frame
	answered bool          // a response came: the server speaks the protocol
	err      error         // why it closed
	closed   chan struct{} // closed with err set
}

// dialConn connects to addr as r says (TLS), within 5 s.
func (r *Remoting) dialConn(ctx context.Context, addr string, onRequest func(int, map[string]string)) (*conn, error) {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	nc, err := r.dial(dctx, addr)
	if err != nil {
		return nil, err
	}
	c := &conn{addr: addr, nc: nc, onRequest: onRequest, pending: map[int32]chan frame{}, closed: make(chan struct{})}
	go c.readLoop()
	return c, nil
}

func (c *conn) readLoop() {
	for {
		f, err := readFrame(c.nc)
		if err != nil {
			c.fail(err)
			return
		}
		if f.Flag&flagResponse == 0 {
			c.serve(f)
			continue
		}
		c.mu.Lock()
		c.answered = true
		ch := c.pending[f.Opaque]
		delete(c.pending, f.Opaque)
		c.mu.Unlock()
		if ch != nil {
			ch <- f // buffered: never blocks
		}
	}
}

// serve handles a request from the server: one-way notifications are
// passed on; anything that wants an answer is told it is not supported.
func (c *conn) serve(f frame) {
	if c.onRequest != nil {
		c.onRequest(f.Code, f.ExtFields)
	}
	if f.Flag&flagOneway != 0 {
		return
	}
	resp := remotingHeader{Code: codeNotSupported, Language: "GO", Version: remotingVersion, Opaque: f.Opaque, Flag: flagResponse,
		Remark: "not served by the inboxbench RocketMQ driver"}
	go func() {
		c.wmu.Lock()
		defer c.wmu.Unlock()
		_ = c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_ = writeFrame(c.nc, resp, nil)
	}()
}

func (c *conn) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	if !c.answered && errors.Is(err, io.EOF) {
		err = &closedError{err: err} // hung up on the first request
	}
	c.err = err
	close(c.closed)
	_ = c.nc.Close()
	c.pending = nil
}

func (c *conn) close() { c.fail(errors.New("connection closed")) }

// broken reports whether the connection has failed.
func (c *conn) broken() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// call sends a request and waits for its response (any response code:
// the caller interprets it) until ctx ends.
func (c *conn) call(ctx context.Context, code int, ext map[string]string, body []byte) (frame, error) {
	h := remotingHeader{Code: code, Language: "GO", Version: remotingVersion, Opaque: rmqOpaque.Add(1), ExtFields: ext}
	ch := make(chan frame, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return frame{}, err
	}
	c.pending[h.Opaque] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.pending, h.Opaque)
		c.mu.Unlock()
	}
	c.wmu.Lock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	err := writeFrame(c.nc, h, body)
	c.wmu.Unlock()
	if err != nil {
		forget()
		c.fail(err)
		return frame{}, err
	}
	select {
	case f := <-ch:
		return f, nil
	case <-c.closed:
		return frame{}, c.closedErr()
	case <-ctx.Done():
		forget()
		return frame{}, ctx.Err()
	}
}

func (c *conn) closedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// pool keeps one connection per server address, dialled on demand and
// again after a failure; every request goes signed (Remoting).
type pool struct {
	r         *Remoting
	onRequest func(code int, ext map[string]string) // requests from the servers

	mu     sync.Mutex
	conns  map[string]*conn
	closed bool
}

func newPool(r *Remoting, onRequest func(int, map[string]string)) *pool {
	return &pool{r: r, onRequest: onRequest, conns: map[string]*conn{}}
}

// fresh reports whether a call to addr would open a new connection (a
// broker then does not know this client yet: a consumer heartbeats first).
func (p *pool) fresh(addr string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.conns[addr]
	return c == nil || c.broken()
}

func (p *pool) conn(ctx context.Context, addr string) (*conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("client closed")
	}
	if c := p.conns[addr]; c != nil && !c.broken() {
		return c, nil
	}
	c, err := p.r.dialConn(ctx, addr, p.onRequest)
	if err != nil {
		return nil, err
	}
	p.conns[addr] = c
	return c, nil
}

// call sends a signed request to addr and returns the response; codes
// other than 0 and those in ok are errors. A refusal of the connection
// settings is explained (Explain).
func (p *pool) call(ctx context.Context, addr string, req request, ok ...int) (frame, error) {
	f, err := p.callOnce(ctx, addr, req, ok...)
	return f, Explain(p.r.cfg, err, p.r.tls != nil)
}

func (p *pool) callOnce(ctx context.Context, addr string, req request, ok ...int) (frame, error) {
	c, err := p.conn(ctx, addr)
	if err != nil {
		return frame{}, err
	}
	f, err := c.call(ctx, req.code, signed(p.r.creds, req.ext, req.body), req.body)
	if err != nil {
		return frame{}, err
	}
	if f.Code != 0 && !slices.Contains(ok, f.Code) {
		return f, &RemotingError{Code: f.Code, Remark: f.Remark}
	}
	return f, nil
}

func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = map[string]*conn{}
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}
