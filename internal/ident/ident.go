package ident

import (
	"github.com/flowfabric/ffd/ffdtype"
	"github.com/google/uuid"
)

// Partitions is the number of logical partitions ids are spread over.
const Partitions = ffdtype.Partitions

// CRC16 is CRC-16/XMODEM: polynomial 0x1021, init 0, no reflection, xorout 0.
// A byte at a time from a table: every id a create mints is hashed to its
// partition (BenchmarkPartition: 75-82 ns an id a bit at a time, 21-22
// from the table). FuzzCRC16 holds it to the bit-at-a-time definition.
func CRC16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^c]
	}
	return crc
}

// crc16Table[i] is the CRC of the byte i alone, shifted through the
// register: what the bit-at-a-time loop does to the high byte.
var crc16Table = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()

// Partition is the partition a uuid hashes to: CRC-16/XMODEM of its 16 raw
// bytes, mod 256.
func Partition(u uuid.UUID) int16 {
	return int16(CRC16(u[:]) % Partitions)
}

// NewUUID mints a version 7 uuid: time-ordered, so ids inserted together sit
// together in every btree that indexes them.
func NewUUID() uuid.UUID {
	return uuid.Must(uuid.NewV7())
}

// NewUUIDIn mints a version 7 uuid whose own partition is partition: a
// fresh one placed by InPartition, so that a solo execution or a flow can
// be placed beside the row it must share a partition with (the holder of
// a key, the flow it reruns) and still satisfy "a solo id's partition is
// its uuid's". partition must be in 0..Partitions-1.
func NewUUIDIn(partition int16) uuid.UUID {
	return InPartition(NewUUID(), partition)
}

// InPartition is u with its last two bytes replaced so that its partition
// is partition (in 0..Partitions-1); its other 14 bytes, and so its
// version and variant, are u's. The same u and partition give the same
// uuid: an id derived from a name (a trigger's flow for an event) can be
// placed beside another row and stay derivable.
//
// CRC-16/XMODEM (init 0, no xorout) is linear over GF(2) in the message,
// so u's CRC is the CRC of u with its last two bytes zeroed, xor the CRC
// of those two bytes alone. The latter is a bijection of the 16-bit
// values; lastBytesFor inverts it on the 256 values a partition needs.
// ff_uuid_in_partition (migration 00041) computes the same in SQL.
func InPartition(u uuid.UUID, partition int16) uuid.UUID {
	u[14], u[15] = 0, 0
	low := byte(CRC16(u[:])) ^ byte(partition)
	var x uint16
	for j, k := range lastBytesFor {
		if low&(1<<j) != 0 {
			x ^= k
		}
	}
	u[14], u[15] = byte(x>>8), byte(x)
	return u
}

// lastBytesFor[j] is the two-byte value whose CRC-16/XMODEM is 1<<j.
// TestLastBytesFor derives them again.
var lastBytesFor = [8]uint16{0x9d71, 0x2ac3, 0x5586, 0xab0c, 0x4639, 0x8c72, 0x08c5, 0x118a}

// KeyPartition is the partition a key hashes to within a namespace: an
// execution created with an idempotency or unique key is placed there, so
// that the key's unique index, which leads with partition_key, sees every
// row that could hold the key.
func KeyPartition(namespace, key string) int16 {
	b := make([]byte, 0, len(namespace)+1+len(key))
	b = append(append(append(b, namespace...), 0), key...)
	return int16(CRC16(b) % Partitions)
}

// ConcurrencyKeyPartition is the partition of a lane's concurrency key,
// where its solo executions are placed: KeyPartition with the lane for
// the namespace, as a concurrency key is the lane's.
func ConcurrencyKeyPartition(lane, key string) int16 { return KeyPartition(lane, key) }

// NewExecutionIDForKey mints a solo execution id on its key's partition.
func NewExecutionIDForKey(namespace, key string) ffdtype.ExecutionID {
	return NewSoloExecutionIDIn(KeyPartition(namespace, key))
}

// NewSoloExecutionIDIn mints a solo execution id on partition, its uuid's
// own (a rerun beside its original).
func NewSoloExecutionIDIn(partition int16) ffdtype.ExecutionID {
	return ffdtype.ExecutionID{Partition: partition, UUID: NewUUIDIn(partition)}
}

// NewExecutionID mints a solo execution id: a fresh v7 uuid on its own
// partition.
func NewExecutionID() ffdtype.ExecutionID {
	u := NewUUID()
	return ffdtype.ExecutionID{Partition: Partition(u), UUID: u}
}

// NewExecutionIDIn mints an execution id on the given partition, as a flow
// member is minted on its flow's partition.
func NewExecutionIDIn(partition int16) ffdtype.ExecutionID {
	return ffdtype.ExecutionID{Partition: partition, UUID: NewUUID()}
}
