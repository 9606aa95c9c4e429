package service

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Proxies are the TCP proxies the suite runs between a service's
// instances and its broker (toxiproxy, in this process): every broker
// connection of the service passes through one, so the suite can cut
// them mid-stream and lose what was in flight — an ack or an offset
// commit the service believes it sent.
type Proxies struct {
	server *toxiproxy.ApiServer
	mu     sync.Mutex
	list   []*toxiproxy.Proxy
}

// NewProxies returns an empty set of proxies.
func NewProxies() *Proxies {
	return &Proxies{server: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())}
}

// Route starts a proxy to upstream listening on listen ("" for a free
// port on the loopback address) and returns the address to connect to.
func (p *Proxies) Route(upstream, listen string) (string, error) {
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	px := toxiproxy.NewProxy(p.server, fmt.Sprintf("p%d", len(p.list)), listen, upstream)
	// A fixed port (a listener advertises it) may be held by another
	// bench's service cell for a while: wait for it.
	for deadline := time.Now().Add(portWait); ; time.Sleep(time.Second) {
		err := px.Start()
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "address already in use") || time.Now().After(deadline) {
			return "", fmt.Errorf("proxy %s → %s: %w (a fixed port: another bench's service cell on the same broker holds it; one at a time per host)", listen, upstream, err)
		}
	}
	p.list = append(p.list, px)
	return px.Listen, nil
}

// Len is how many proxies run.
func (p *Proxies) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.list)
}

// portWait bounds the wait for a fixed proxy port another process holds.
const portWait = 2 * time.Minute

// resetAfter is how long Cut lets the reset toxics catch the connections
// that are sending before it closes the idle ones.
const resetAfter = 500 * time.Millisecond

// Cut breaks every connection through the proxies: first each one that
// sends — in either direction — is reset on its next chunk, which is
// dropped (an ack, an offset commit, a delivery in flight: gone, though
// its sender's write succeeded); then whatever stayed idle is closed.
// New connections are accepted again when Cut returns.
func (p *Proxies) Cut(ctx context.Context) error {
	p.mu.Lock()
	list := append([]*toxiproxy.Proxy(nil), p.list...)
	p.mu.Unlock()
	for _, px := range list {
		for _, dir := range []string{"upstream", "downstream"} {
			body := fmt.Sprintf(`{"name":"cut_%s","type":"reset_peer","stream":%q,"attributes":{"timeout":0}}`, dir, dir)
			if _, err := px.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
				return fmt.Errorf("proxy %s: %w", px.Upstream, err)
			}
		}
	}
	select {
	case <-ctx.Done():
	case <-time.After(resetAfter):
	}
	for _, px := range list {
		px.Stop() // closes the idle ones too
		for _, dir := range []string{"upstream", "downstream"} {
			_ = px.Toxics.RemoveToxic(context.WithoutCancel(ctx), "cut_"+dir)
		}
		if err := px.Start(); err != nil {
			return fmt.Errorf("proxy %s: listen again on %s: %w", px.Upstream, px.Listen, err)
		}
	}
	return nil
}

// Close stops every proxy and closes its connections.
func (p *Proxies) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, px := range p.list {
		px.Stop()
	}
	p.list = nil
}
