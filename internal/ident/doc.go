// Package ident mints and parses ffd's identifiers.
//
// Flow and edge ids are UUIDs, version 7 so that rows created together are
// neighbours in every index. Execution ids carry their partition in the wire
// form `{fp:N}:<uuid>`; the partition is the co-location key of every flow-
// and execution-scoped table (it leads their primary keys), so that a flow
// and its members can later be distributed together. A solo execution takes
// the partition of its own uuid, CRC-16/XMODEM over the 16 raw bytes mod 256;
// a flow member takes its flow's partition.
//
// The id types and their strict parsing (one spelling per id) are
// ffdtype's, where callers reach them too.
package ident
