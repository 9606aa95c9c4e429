package external

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/inboxbench/inboxbench/internal/ctxtime"
)

// The service's HTTP API, under /v1/{ns}/ (ns: the cell's namespace,
// created on first use):
//
//	POST   payments        Idempotency-Key: K (optional), body Request → 201 Payment (applied),
//	                       200 Payment with Idempotent-Replayed: true (the stored result),
//	                       409 (key reused with a different request), 503 (unavailable)
//	GET    payments?key=K  → 200 Payment, or 404 (never applied)
//	PUT    config          body Config
//	POST   unavailable     body {"for": "2s"}: refuse every call for that long
//	GET    log?after=N&limit=M → {"calls": […]}: the call log after seq N, at most M (10,000) calls
//	DELETE /v1/{ns}        forget the namespace
//
// A payment request with the header Inboxbench-Fault: timeout is applied
// (or replayed) and then its answer is held until the caller gives up,
// once per reference.

// Header names.
const (
	HeaderKey      = "Idempotency-Key"
	HeaderReplayed = "Idempotent-Replayed"
	HeaderFault    = "Inboxbench-Fault"
)

// logPage bounds the calls one log request returns.
const logPage = 10_000

// maxHold bounds how long a held answer waits for its caller to give up.
const maxHold = time.Minute

// Service is the payment provider stand-in: namespaces of stored results
// and call logs. It is an http.Handler; safe for concurrent use.
type Service struct {
	mu  sync.Mutex
	nss map[string]*namespace
	mux *http.ServeMux
}

// namespace is one cell's provider.
type namespace struct {
	mu       sync.Mutex
	cfg      Config
	byKey    map[string]*stored
	payments int64
	log      []Call
	downTill time.Time
	// faulted holds the references whose timeout fault fired.
	faulted map[string]bool
}

type stored struct {
	fingerprint string
	p           Payment
}

// NewService returns an empty service.
func NewService() *Service {
	s := &Service{nss: map[string]*namespace{}, mux: http.NewServeMux()}
	s.mux.HandleFunc("POST /v1/{ns}/payments", s.pay)
	s.mux.HandleFunc("GET /v1/{ns}/payments", s.query)
	s.mux.HandleFunc("PUT /v1/{ns}/config", s.config)
	s.mux.HandleFunc("POST /v1/{ns}/unavailable", s.unavailable)
	s.mux.HandleFunc("GET /v1/{ns}/log", s.readLog)
	s.mux.HandleFunc("DELETE /v1/{ns}", s.drop)
	s.mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	return s
}

// ServeHTTP implements http.Handler: the API above.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *Service) ns(r *http.Request) *namespace {
	name := r.PathValue("ns")
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nss[name]
	if n == nil {
		n = &namespace{byKey: map[string]*stored{}, faulted: map[string]bool{}}
		s.nss[name] = n
	}
	return n
}

// apply takes one payment request as the HTTP API does and returns the
// HTTP status it answers with; fault is FaultTimeout or "", and hold says
// whether the answer is to be held.
func (n *namespace) apply(req Request, fault string, now time.Time) (Payment, int, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := Call{At: now, Op: OpPay, Key: req.Key, Reference: req.Reference, Account: req.Account, Amount: req.Amount, Fingerprint: req.Fingerprint()}
	if now.Before(n.downTill) {
		c.Outcome = Refused
		n.record(c)
		return Payment{}, http.StatusServiceUnavailable, false
	}
	hold := fault == FaultTimeout && !n.faulted[req.Reference]
	if hold {
		n.faulted[req.Reference] = true
		c.Fault = FaultTimeout
	}
	if req.Key != "" {
		if st := n.byKey[req.Key]; st != nil {
			if st.fingerprint != c.Fingerprint {
				c.Outcome, c.Payment = Conflict, st.p.ID
				n.record(c)
				return Payment{}, http.StatusConflict, hold
			}
			c.Outcome, c.Payment = Replayed, st.p.ID
			n.record(c)
			p := st.p
			p.Replayed = true
			return p, http.StatusOK, hold
		}
	}
	n.payments++
	p := Payment{ID: fmt.Sprintf("pay_%08d", n.payments), Key: req.Key, Reference: req.Reference, Account: req.Account, Amount: req.Amount, CreatedAt: now}
	if req.Key != "" {
		n.byKey[req.Key] = &stored{fingerprint: c.Fingerprint, p: p}
	}
	c.Outcome, c.Payment = Applied, p.ID
	n.record(c)
	return p, http.StatusCreated, hold
}

// lookup is a result query by key, answered with the HTTP status.
func (n *namespace) lookup(key string, now time.Time) (Payment, int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := Call{At: now, Op: OpQuery, Key: key, Outcome: Missing}
	st := n.byKey[key]
	switch {
	case now.Before(n.downTill):
		c.Outcome = Refused
		n.record(c)
		return Payment{}, http.StatusServiceUnavailable
	case st == nil:
		n.record(c)
		return Payment{}, http.StatusNotFound
	}
	c.Outcome, c.Payment, c.Reference = Found, st.p.ID, st.p.Reference
	n.record(c)
	return st.p, http.StatusOK
}

func (n *namespace) record(c Call) {
	c.Seq = int64(len(n.log)) + 1
	n.log = append(n.log, c)
}

func (n *namespace) delay() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cfg.Delay
}

func (s *Service) pay(w http.ResponseWriter, r *http.Request) {
	n := s.ns(r)
	var req Request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
		return
	}
	req.Key = r.Header.Get(HeaderKey)
	// The provider works, then answers: a caller that gives up during
	// the delay never learns whether the payment was made.
	if !ctxtime.Sleep(r.Context(), n.delay()) { // the caller gave up first
		return
	}
	p, status, hold := n.apply(req, r.Header.Get(HeaderFault), time.Now())
	if hold {
		// Applied (or replayed); the answer is held until the caller gave
		// up: its call timed out after the service applied it.
		select {
		case <-r.Context().Done():
		case <-time.After(maxHold):
		}
		return
	}
	switch status {
	case http.StatusServiceUnavailable:
		http.Error(w, "unavailable", status)
	case http.StatusConflict:
		http.Error(w, "idempotency key "+strconv.Quote(req.Key)+" was used with a different request", status)
	default:
		if p.Replayed {
			w.Header().Set(HeaderReplayed, "true")
		}
		writeJSON(w, status, p)
	}
}

func (s *Service) query(w http.ResponseWriter, r *http.Request) {
	n := s.ns(r)
	key := r.URL.Query().Get("key")
	if key == "" {
		http.Error(w, "key: missing", http.StatusBadRequest)
		return
	}
	if !ctxtime.Sleep(r.Context(), n.delay()) { // the caller gave up first
		return
	}
	switch p, status := n.lookup(key, time.Now()); status {
	case http.StatusOK:
		writeJSON(w, status, p)
	case http.StatusNotFound:
		http.Error(w, "no payment with key "+strconv.Quote(key), status)
	default:
		http.Error(w, "unavailable", status)
	}
}

func (s *Service) config(w http.ResponseWriter, r *http.Request) {
	var c Config
	if err := json.NewDecoder(r.Body).Decode(&c); err != nil || c.Delay < 0 {
		http.Error(w, fmt.Sprintf("config: %v (delay %s)", err, c.Delay), http.StatusBadRequest)
		return
	}
	n := s.ns(r)
	n.mu.Lock()
	n.cfg = c
	n.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

type unavailableBody struct {
	For time.Duration `json:"for"`
}

func (s *Service) unavailable(w http.ResponseWriter, r *http.Request) {
	var b unavailableBody
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil || b.For < 0 {
		http.Error(w, fmt.Sprintf("unavailable: %v", err), http.StatusBadRequest)
		return
	}
	n := s.ns(r)
	n.mu.Lock()
	n.downTill = time.Now().Add(b.For)
	n.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Service) readLog(w http.ResponseWriter, r *http.Request) {
	after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	limit, err := strconv.ParseInt(r.URL.Query().Get("limit"), 10, 64)
	if err != nil || limit <= 0 || limit > logPage {
		limit = logPage
	}
	n := s.ns(r)
	n.mu.Lock()
	var page []Call
	if after >= 0 && after < int64(len(n.log)) {
		page = append(page, n.log[after:min(int64(len(n.log)), after+limit)]...)
	}
	n.mu.Unlock()
	writeJSON(w, http.StatusOK, Log{Calls: page})
}

func (s *Service) drop(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	delete(s.nss, r.PathValue("ns"))
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Server is a running service.
type Server struct {
	URL string
	srv *http.Server
	ln  net.Listener
}

// Start serves a new Service on addr ("127.0.0.1:0": a free loopback
// port) in this process; URL is where it answers.
func Start(addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("external service: listen on %s: %w", addr, err)
	}
	s := &Server{URL: "http://" + ln.Addr().String(), ln: ln,
		srv: &http.Server{Handler: NewService(), ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server; calls in flight are cut off.
func (s *Server) Close() error { return s.srv.Close() }

// Serve runs a Service on addr until ctx ends: `bench external serve`.
func Serve(ctx context.Context, addr string, ready func(url string)) error {
	s, err := Start(addr)
	if err != nil {
		return err
	}
	if ready != nil {
		ready(s.URL)
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
