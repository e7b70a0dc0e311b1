// Package ffdtype holds the types ffd's API and its machinery share: the
// rows a caller reads (Execution, Flow, Edge, EdgeGroup, Lane, Schedule,
// Attempt), the vocabulary they are written in (State, FlowState, the join
// policies), execution ids, and the typed errors every operation returns.
//
// It is a leaf: it imports nothing of ffd's, so that the store below the
// API can build these values directly and the API above it can hand them
// out as they are. Package ffd re-exports every type here under the same
// name (ffd.Execution is ffdtype.Execution), which is how most programs
// use them; import ffdtype directly only in code that must not import ffd
// itself. The model is River's rivertype.
package ffdtype
