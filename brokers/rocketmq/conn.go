package rocketmq

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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

	mu      sync.Mutex
	pending map[int32]chan frame
	err     error         // why it closed
	closed  chan struct{} // closed with err set
}

func dialConn(ctx context.Context, addr string, onRequest func(int, map[string]string)) (*conn, error) {
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	nc, err := d.DialContext(dctx, "tcp", addr)
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
