package ident

import (
	"testing"

	"github.com/google/uuid"
)

// crc16Bitwise is CRC-16/XMODEM a bit at a time, as its definition
// reads: the reference the table-driven CRC16 must agree with.
func crc16Bitwise(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// Partitions are the database's too (the SQL API computes them), so the
// table-driven CRC must give what the definition gives for every input.
func FuzzCRC16(f *testing.F) {
	f.Add([]byte(""))
	f.Add([]byte("123456789"))
	f.Add(make([]byte, 16))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := CRC16(b), crc16Bitwise(b); got != want {
			t.Fatalf("CRC16(%x) = %#04x, want %#04x (bit at a time)", b, got, want)
		}
	})
}

func BenchmarkPartition(b *testing.B) {
	u := uuid.Must(uuid.NewV7())
	var p int16
	for b.Loop() {
		p ^= Partition(u)
	}
	_ = p
}
