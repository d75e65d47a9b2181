package tensorboard

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// castagnoli is CRC-32C, the checksum of TFRecord framing.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MaskedCRC is TFRecord's masked CRC-32C of b: the CRC rotated right by 15 bits plus
// a constant, so that a CRC stored inside checksummed data does not checksum to a
// fixed value (tensorflow/core/lib/hash/crc32c.h, Mask).
func MaskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return ((c >> 15) | (c << 17)) + 0xa282ead8
}

// headerLen and footerLen frame each record: its length (uint64, little-endian) and
// the length's masked CRC before the data, the data's masked CRC after it.
const (
	headerLen = 8 + 4
	footerLen = 4
)

// AppendRecord appends data framed as one TFRecord to dst.
func AppendRecord(dst, data []byte) []byte {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(data)))
	dst = append(dst, n[:]...)
	dst = binary.LittleEndian.AppendUint32(dst, MaskedCRC(n[:]))
	dst = append(dst, data...)
	return binary.LittleEndian.AppendUint32(dst, MaskedCRC(data))
}

// Records splits b into its records' data, checking both CRCs of each. A record cut
// short at the end of b is reported with the records before it, as TensorBoard's
// reader skips a truncated last record (a file still being written); complete records
// with a bad CRC are an error.
func Records(b []byte) (recs [][]byte, truncated bool, err error) {
	for off := 0; off < len(b); {
		if len(b)-off < headerLen {
			return recs, true, nil
		}
		hdr := b[off : off+8]
		if got, want := binary.LittleEndian.Uint32(b[off+8:]), MaskedCRC(hdr); got != want {
			return recs, false, fmt.Errorf("record %d at byte %d: length crc %08x, want %08x: %w", len(recs), off, got, want, ErrCorrupt)
		}
		n := binary.LittleEndian.Uint64(hdr)
		if avail := len(b) - off - headerLen - footerLen; avail < 0 || n > uint64(avail) {
			return recs, true, nil
		}
		data := b[off+headerLen : off+headerLen+int(n)]
		end := off + headerLen + int(n)
		if got, want := binary.LittleEndian.Uint32(b[end:]), MaskedCRC(data); got != want {
			return recs, false, fmt.Errorf("record %d at byte %d: data crc %08x, want %08x: %w", len(recs), off, got, want, ErrCorrupt)
		}
		recs = append(recs, data)
		off = end + footerLen
	}
	return recs, false, nil
}
