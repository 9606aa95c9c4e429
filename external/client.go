package external

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// API is what a handler calls: a payment, and the result of a key.
// Client implements it; the runner wraps it to inject the fault plan and
// to measure the calls.
type API interface {
	// Pay sends req. Its error is ErrUnknownOutcome (no answer: it may
	// have been applied), ErrRefused (not applied) or ErrKeyConflict.
	Pay(ctx context.Context, req Request) (Payment, error)
	// Lookup queries the result of key: found reports whether a request
	// with the key was ever applied.
	Lookup(ctx context.Context, key string) (p Payment, found bool, err error)
}

// DefaultTimeout bounds a call when the caller sets no timeout.
const DefaultTimeout = 5 * time.Second

// Client calls one namespace of a service.
type Client struct {
	base    string // …/v1/NS
	http    *http.Client
	timeout time.Duration
	page    int // calls per log request
	// Fault, when set, names the fault to ask the service for on a
	// payment request (FaultTimeout or ""); the runner sets it from the
	// workload's fault plan.
	Fault func(Request) string
}

// NewClient calls namespace ns of the service at baseURL (as Server.URL);
// each call gives up after timeout (0: DefaultTimeout).
func NewClient(baseURL, ns string, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Consumers call concurrently; keep their connections.
	tr.MaxIdleConnsPerHost = 64
	return &Client{base: strings.TrimSuffix(baseURL, "/") + "/v1/" + url.PathEscape(ns), http: &http.Client{Transport: tr}, timeout: timeout, page: logPage}
}

// Close releases the client's idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// call is one request to the namespace: path is below its base, body
// (nil: none) goes as JSON, the headers with a value are set, and the
// call gives up after timeout (0: ctx alone bounds it).
type call struct {
	method, path string
	body         any
	hdr          map[string]string
	timeout      time.Duration
}

func (c *Client) do(ctx context.Context, r call) (*http.Response, []byte, error) {
	var rd io.Reader
	if r.body != nil {
		b, err := json.Marshal(r.body)
		if err != nil {
			return nil, nil, err
		}
		rd = bytes.NewReader(b)
	}
	if r.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, r.method, c.base+r.path, rd)
	if err != nil {
		return nil, nil, err
	}
	for k, v := range r.hdr {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// callErr classifies a failed round trip: refused before anything was
// sent (connection refused) is ErrRefused; otherwise the request may have
// reached the service, and its outcome is unknown.
func callErr(what string, err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return fmt.Errorf("%s: %w: %v", what, ErrRefused, err)
	}
	return fmt.Errorf("%s: %w: %v", what, ErrUnknownOutcome, err)
}

// Pay implements API.
func (c *Client) Pay(ctx context.Context, r Request) (Payment, error) {
	what := "payment " + r.Reference
	if r.Key != "" {
		what += " (key " + r.Key + ")"
	}
	var fault string
	if c.Fault != nil {
		fault = c.Fault(r)
	}
	resp, b, err := c.do(ctx, call{method: http.MethodPost, path: "/payments", body: r,
		hdr: map[string]string{HeaderKey: r.Key, HeaderFault: fault}, timeout: c.timeout})
	if err != nil {
		return Payment{}, callErr(what, err)
	}
	switch resp.StatusCode {
	case http.StatusCreated, http.StatusOK:
		var p Payment
		if err := json.Unmarshal(b, &p); err != nil {
			return Payment{}, fmt.Errorf("%s: %w: unreadable answer: %v", what, ErrUnknownOutcome, err)
		}
		p.Replayed = resp.Header.Get(HeaderReplayed) == "true"
		return p, nil
	case http.StatusConflict:
		return Payment{}, fmt.Errorf("%s: %w", what, ErrKeyConflict)
	case http.StatusServiceUnavailable:
		return Payment{}, fmt.Errorf("%s: %w", what, ErrRefused)
	}
	return Payment{}, fmt.Errorf("%s: %w: HTTP %d: %s", what, ErrUnknownOutcome, resp.StatusCode, bytes.TrimSpace(b))
}

// Lookup implements API.
func (c *Client) Lookup(ctx context.Context, key string) (Payment, bool, error) {
	what := "result of key " + key
	resp, b, err := c.do(ctx, call{method: http.MethodGet, path: "/payments?key=" + url.QueryEscape(key), timeout: c.timeout})
	if err != nil {
		return Payment{}, false, callErr(what, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		var p Payment
		if err := json.Unmarshal(b, &p); err != nil {
			return Payment{}, false, fmt.Errorf("%s: %w: unreadable answer: %v", what, ErrUnknownOutcome, err)
		}
		return p, true, nil
	case http.StatusNotFound:
		return Payment{}, false, nil
	case http.StatusServiceUnavailable:
		return Payment{}, false, fmt.Errorf("%s: %w", what, ErrRefused)
	}
	return Payment{}, false, fmt.Errorf("%s: %w: HTTP %d: %s", what, ErrUnknownOutcome, resp.StatusCode, bytes.TrimSpace(b))
}

// admin runs a call of the harness (configuration, faults, the log),
// within 30 s, and decodes its answer into out (nil: none).
func (c *Client) admin(ctx context.Context, r call, out any) error {
	r.timeout = 30 * time.Second
	resp, b, err := c.do(ctx, r)
	if err != nil {
		return fmt.Errorf("external service %s %s: %w", r.method, r.path, err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("external service %s %s: HTTP %d: %s", r.method, r.path, resp.StatusCode, bytes.TrimSpace(b))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// Configure sets the namespace's behaviour.
func (c *Client) Configure(ctx context.Context, cfg Config) error {
	return c.admin(ctx, call{method: http.MethodPut, path: "/config", body: cfg}, nil)
}

// SetUnavailable makes the service refuse every call for d from now.
func (c *Client) SetUnavailable(ctx context.Context, d time.Duration) error {
	return c.admin(ctx, call{method: http.MethodPost, path: "/unavailable", body: unavailableBody{For: d}}, nil)
}

// Log reads the namespace's whole call log.
func (c *Client) Log(ctx context.Context) (*Log, error) {
	l := &Log{}
	for {
		var page Log
		path := "/log?after=" + strconv.Itoa(len(l.Calls)) + "&limit=" + strconv.Itoa(c.page)
		if err := c.admin(ctx, call{method: http.MethodGet, path: path}, &page); err != nil {
			return nil, err
		}
		l.Calls = append(l.Calls, page.Calls...)
		if len(page.Calls) < c.page {
			return l, nil
		}
	}
}

// Drop forgets the namespace.
func (c *Client) Drop(ctx context.Context) error {
	return c.admin(ctx, call{method: http.MethodDelete}, nil)
}

// Ping checks that a service answers at baseURL.
func Ping(ctx context.Context, baseURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(baseURL, "/")+"/v1/health", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("external service at %s: %w", baseURL, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("external service at %s: health: HTTP %d (is it an inboxbench external service?)", baseURL, resp.StatusCode)
	}
	return nil
}
