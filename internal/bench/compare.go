package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"time"

	"go.uber.org/zap"
)

// Comparison is ffd against a peer (bench/peers/river) on one cluster:
// each round runs both sides, in fresh databases of their own, ffd first
// in even rounds and the peer first in odd ones.
type Comparison struct {
	Scenario string         `json:"scenario"`
	Rounds   int            `json:"rounds"`
	Machine  Machine        `json:"machine"`
	Points   []*ComparedRun `json:"points"`
}

// ComparedRun is one measurement (a worker count of the curve, or the
// scenario itself) over every round.
type ComparedRun struct {
	Name string `json:"name"`
	// Figure is the rate compared: executions per second.
	Figure string               `json:"figure"`
	FFD    []map[string]float64 `json:"ffd"`
	Peer   []map[string]float64 `json:"peer"`
	// Summary holds the medians of each side, the median of the per-round
	// ratios (ffd ÷ peer) of the rate and, when both sides report it, of
	// the database time per execution.
	Summary map[string]float64 `json:"summary"`
}

// point is one ffd run and the peer's equivalent.
type point struct {
	name   string
	figure string
	ffd    func(ctx context.Context, env *Env) (map[string]float64, error)
	peer   []string
}

func comparePoints(scenario string, p Params) ([]point, error) {
	workPoint := func(n, w int) point {
		return point{name: fmt.Sprintf("%d workers", w), figure: "executions_per_second",
			ffd: func(ctx context.Context, env *Env) (map[string]float64, error) {
				f, err := env.work(ctx, "compare", n, w, p.SweepInterval)
				if err != nil {
					return nil, err
				}
				m := map[string]float64{"executions_per_second": f.Rate, "claim_to_complete_p50_ms": ms(f.Lat[0])}
				if f.HasDB {
					m["db_us_per_execution"] = f.DBus
				}
				return m, env.checkInvariants(ctx)
			},
			peer: []string{"--mode", "work", "--executions", strconv.Itoa(n), "--workers", strconv.Itoa(w)}}
	}
	switch scenario {
	case "throughput":
		return []point{workPoint(p.Executions, p.Workers)}, nil
	case "curve":
		var ps []point
		for _, w := range p.WorkerCurve {
			ps = append(ps, workPoint(curveSize(p.Executions, w), w))
		}
		return ps, nil
	case "enqueue":
		return []point{{name: fmt.Sprintf("batches of %d", enqueueBatch), figure: "executions_per_second",
			ffd: func(ctx context.Context, env *Env) (map[string]float64, error) {
				r := &Report{Figures: map[string]any{}}
				q := p
				q.Creates = 0 // the peer has no single-insert equivalent
				if err := enqueueMany(ctx, env, q, r); err != nil {
					return nil, err
				}
				m := map[string]float64{"executions_per_second": r.Figures["create_many_per_second"].(float64)}
				if v, ok := r.Figures["create_many_db_us_per_execution"].(float64); ok {
					m["db_us_per_execution"] = v
				}
				return m, nil
			},
			peer: []string{"--mode", "insert", "--executions", strconv.Itoa(p.Executions)}}}, nil
	}
	return nil, fmt.Errorf("scenario %q has no peer equivalent: want one of %v", scenario, CompareScenarios)
}

// Compare runs scenario and the peer program at peerPath alternately,
// p.Rounds times, each run in a fresh database from env.NewDatabase.
func Compare(ctx context.Context, env *Env, scenario string, p Params, peerPath string) (*Comparison, error) {
	p.defaults()
	rounds := p.Rounds
	if env.NewDatabase == nil {
		return nil, fmt.Errorf("a comparison runs each side in a database of its own: run it where the bench may create databases")
	}
	points, err := comparePoints(scenario, p)
	if err != nil {
		return nil, err
	}
	c := &Comparison{Scenario: scenario, Rounds: rounds}
	if c.Machine, err = machine(ctx, env.Pool); err != nil {
		return nil, err
	}
	for _, pt := range points {
		c.Points = append(c.Points, &ComparedRun{Name: pt.name, Figure: pt.figure})
	}
	for round := range rounds {
		for i, pt := range points {
			sides := []func() error{
				func() error {
					m, err := env.compareFFD(ctx, pt)
					c.Points[i].FFD = append(c.Points[i].FFD, m)
					return err
				},
				func() error {
					m, err := env.comparePeer(ctx, peerPath, pt)
					c.Points[i].Peer = append(c.Points[i].Peer, m)
					return err
				},
			}
			if round%2 == 1 {
				sides[0], sides[1] = sides[1], sides[0]
			}
			for _, side := range sides {
				if err := side(); err != nil {
					return nil, fmt.Errorf("round %d, %s: %w", round+1, pt.name, err)
				}
			}
			env.Log.Info("compared", zap.Int("round", round+1), zap.String("point", pt.name),
				zap.Float64("ffd", c.Points[i].FFD[round][pt.figure]), zap.Float64("peer", c.Points[i].Peer[round][pt.figure]))
		}
	}
	for _, cr := range c.Points {
		cr.Summary = summarize(cr.Figure, cr.FFD, cr.Peer)
	}
	return c, nil
}

// summarize gives each side's medians and the medians of the per-round
// ratios, ffd ÷ peer.
func summarize(figure string, ffd, peer []map[string]float64) map[string]float64 {
	s := map[string]float64{}
	for _, key := range []string{figure, "db_us_per_execution"} {
		var fs, ps, ratios []float64
		for i := range ffd {
			f, okF := ffd[i][key]
			q, okP := peer[i][key]
			if !okF || !okP || q == 0 {
				continue
			}
			fs, ps, ratios = append(fs, f), append(ps, q), append(ratios, f/q)
		}
		if len(ratios) == 0 {
			continue
		}
		s["ffd_"+key] = median(fs)
		s["peer_"+key] = median(ps)
		s["ratio_"+key] = median(ratios)
	}
	return s
}

// fresh is an Env like e's over a fresh database from NewDatabase.
func (e *Env) fresh(ctx context.Context) (*Env, func(), error) {
	pool, url, drop, err := e.NewDatabase(ctx)
	if err != nil {
		return nil, nil, err
	}
	return &Env{Pool: pool, URL: url, Log: e.Log, Namespace: e.Namespace}, drop, nil
}

func (e *Env) compareFFD(ctx context.Context, pt point) (map[string]float64, error) {
	side, drop, err := e.fresh(ctx)
	if err != nil {
		return nil, err
	}
	defer drop()
	return pt.ffd(ctx, side)
}

func (e *Env) comparePeer(ctx context.Context, path string, pt point) (map[string]float64, error) {
	_, url, drop, err := e.NewDatabase(ctx)
	if err != nil {
		return nil, err
	}
	defer drop()
	pctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(pctx, path, append([]string{"--database-url", url}, pt.peer...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("peer %s: %w: %s", path, err, lastLine(stderr.String()))
	}
	var raw map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &raw); err != nil {
		return nil, fmt.Errorf("peer %s printed %q: %w", path, stdout.String(), err)
	}
	m := map[string]float64{}
	for k, v := range raw {
		if f, ok := v.(float64); ok {
			m[k] = f
		}
	}
	if _, ok := m[pt.figure]; !ok {
		return nil, fmt.Errorf("peer %s reported no %s: %q", path, pt.figure, stdout.String())
	}
	return m, nil
}
