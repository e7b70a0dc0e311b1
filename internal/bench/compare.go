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
// each round runs both sides, and for throughput the floor as a third,
// each in a fresh database of its own, the order turning by one side
// every round.
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
	// Floor is the floor scenario's run in each round, when the point has
	// one (throughput).
	Floor []map[string]float64 `json:"floor,omitempty"`
	// Summary holds the medians of each side, the median of the per-round
	// ratios (ffd ÷ peer) of the rate and, when both sides report it, of
	// the database time per execution; with a floor, its medians
	// (floor_*) and the medians of ffd ÷ floor and peer ÷ floor
	// (ffd_over_floor_*, peer_over_floor_*).
	Summary map[string]float64 `json:"summary"`
}

// point is one ffd run and the peer's equivalent.
type point struct {
	name   string
	figure string
	ffd    func(ctx context.Context, env *Env) (map[string]float64, error)
	peer   []string
	// floor: the floor scenario runs as a third side over the same
	// executions.
	floor bool
}

func comparePoints(scenario string, p Params) ([]point, error) {
	workPoint := func(n, w int) point {
		return point{name: fmt.Sprintf("%d workers", w), figure: "executions_per_second",
			ffd: func(ctx context.Context, env *Env) (map[string]float64, error) {
				f, err := env.work(ctx, "compare", n, w, p.SweepInterval)
				if err != nil {
					return nil, err
				}
				m := f.compared()
				m["claim_to_complete_p50_ms"] = ms(f.Lat[0])
				return m, env.checkInvariants(ctx)
			},
			peer: []string{"--mode", "work", "--executions", strconv.Itoa(n), "--workers", strconv.Itoa(w)}}
	}
	switch scenario {
	case "throughput":
		pt := workPoint(p.Executions, p.Workers)
		pt.floor = true
		return []point{pt}, nil
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
			if err := env.compareRound(ctx, c.Points[i], pt, p, peerPath, round); err != nil {
				return nil, fmt.Errorf("round %d, %s: %w", round+1, pt.name, err)
			}
		}
	}
	for _, cr := range c.Points {
		cr.Summary = map[string]float64{}
		summarize(cr.Summary, cr.Figure, "ffd", "peer", "ratio", cr.FFD, cr.Peer)
		if len(cr.Floor) > 0 {
			summarize(cr.Summary, cr.Figure, "ffd", "floor", "ffd_over_floor", cr.FFD, cr.Floor)
			summarize(cr.Summary, cr.Figure, "peer", "floor", "peer_over_floor", cr.Peer, cr.Floor)
		}
	}
	return c, nil
}

// compareRound runs one round of pt: each side once, the first side
// turning by one every round so that none always runs on a colder or
// warmer server.
func (e *Env) compareRound(ctx context.Context, cr *ComparedRun, pt point, p Params, peerPath string, round int) error {
	sides := []func() error{
		func() error {
			m, err := e.onFresh(ctx, pt.ffd)
			cr.FFD = append(cr.FFD, m)
			return err
		},
		func() error {
			m, err := e.comparePeer(ctx, peerPath, pt)
			cr.Peer = append(cr.Peer, m)
			return err
		},
	}
	if pt.floor {
		sides = append(sides, func() error {
			m, err := e.onFresh(ctx, func(ctx context.Context, side *Env) (map[string]float64, error) {
				f, err := side.floor(ctx, p)
				if err != nil {
					return nil, fmt.Errorf("floor: %w", err)
				}
				return f.compared(), nil
			})
			cr.Floor = append(cr.Floor, m)
			return err
		})
	}
	for k := range sides {
		if err := sides[(k+round)%len(sides)](); err != nil {
			return err
		}
	}
	fields := []zap.Field{zap.Int("round", round+1), zap.String("point", pt.name),
		zap.Float64("ffd", cr.FFD[round][pt.figure]), zap.Float64("peer", cr.Peer[round][pt.figure])}
	if pt.floor {
		fields = append(fields, zap.Float64("floor", cr.Floor[round][pt.figure]))
	}
	e.Log.Info("compared", fields...)
	return nil
}

// summarize writes into s the medians of sides a and b (as aName_key
// and bName_key, unless already there) and the median of their per-round
// ratios, a ÷ b (ratioName_key), for the figure and the database time
// per execution.
func summarize(s map[string]float64, figure, aName, bName, ratioName string, a, b []map[string]float64) {
	for _, key := range []string{figure, "db_us_per_execution"} {
		var as, bs, ratios []float64
		for i := range min(len(a), len(b)) {
			x, okA := a[i][key]
			y, okB := b[i][key]
			if !okA || !okB || y == 0 {
				continue
			}
			as, bs, ratios = append(as, x), append(bs, y), append(ratios, x/y)
		}
		if len(ratios) == 0 {
			continue
		}
		for name, vs := range map[string][]float64{aName: as, bName: bs} {
			if _, ok := s[name+"_"+key]; !ok {
				s[name+"_"+key] = median(vs)
			}
		}
		s[ratioName+"_"+key] = median(ratios)
	}
}

// fresh is an Env like e's over a fresh database from NewDatabase.
func (e *Env) fresh(ctx context.Context) (*Env, func(), error) {
	pool, url, drop, err := e.NewDatabase(ctx)
	if err != nil {
		return nil, nil, err
	}
	return &Env{Pool: pool, URL: url, Log: e.Log, Namespace: e.Namespace}, drop, nil
}

// onFresh runs one side of a round in a fresh database.
func (e *Env) onFresh(ctx context.Context, run func(context.Context, *Env) (map[string]float64, error)) (map[string]float64, error) {
	side, drop, err := e.fresh(ctx)
	if err != nil {
		return nil, err
	}
	defer drop()
	return run(ctx, side)
}

// compared is a run's figures as a comparison records them: the rate,
// and the database time per execution when the server reports it.
func (f workFigures) compared() map[string]float64 {
	m := map[string]float64{"executions_per_second": f.Rate}
	if f.HasDB {
		m["db_us_per_execution"] = f.DBus
	}
	return m
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
