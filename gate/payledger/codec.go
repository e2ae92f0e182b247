package payledger

import (
	"encoding/binary"
	"fmt"
	"sync"
)

// codec keeps a Memory's settlements small. Each is written as copies from a dictionary,
// the first settlement the ledger kept, and literals, whose runs of hex digits are packed
// two to a byte: settlements paid on one route share everything but the payer, the
// transaction and perhaps the amount, so about 340 bytes of JSON become about 80. Any data
// comes back byte for byte; data that does not shrink is kept as it is.
type codec struct {
	once  sync.Once
	dict  []byte
	table [1 << tableBits]int32 // a 4-byte window's hash -> its first offset in dict, plus 1
}

const (
	tableBits = 12
	// minCopy is the shortest copy from the dictionary worth its op; minHex the shortest
	// run of hex digits worth packing.
	minCopy = 6
	minHex  = 8
)

// Encoded forms: "" is nil; otherwise a tag byte, then the data as it is or as ops.
const (
	tagRaw = 'r'
	tagOps = 'o'
)

// An op is a uvarint header h: its kind is h&3, its length h>>2.
const (
	opRaw   = iota // the bytes follow
	opCopy         // a uvarint offset in the dictionary follows
	opHex          // lower-case hex digits, packed two to a byte, follow
	opHexUp        // hex digits, packed, then a bit mask of the upper-case letters, follow
)

func window(b []byte) uint32 {
	return binary.LittleEndian.Uint32(b) * 2654435761 >> (32 - tableBits)
}

func (c *codec) setDict(data []byte) {
	c.dict = clone(data)
	for i := len(c.dict) - 4; i >= 0; i-- {
		c.table[window(c.dict[i:])] = int32(i + 1)
	}
}

// encode is data as a slot keeps it.
func (c *codec) encode(data []byte) string {
	if data == nil {
		return ""
	}
	c.once.Do(func() { c.setDict(data) })
	out := append(make([]byte, 0, len(data)/2+16), tagOps)
	lit := 0
	for i := 0; i+4 <= len(data); {
		if off, n := c.match(data, i); n >= minCopy {
			out = appendLiteral(out, data[lit:i])
			out = binary.AppendUvarint(out, uint64(n)<<2|opCopy)
			out = binary.AppendUvarint(out, uint64(off))
			i += n
			lit = i
			continue
		}
		i++
	}
	out = appendLiteral(out, data[lit:])
	if len(out) >= 1+len(data) {
		return string(tagRaw) + string(data)
	}
	return string(out)
}

// match is the dictionary's match of data at i: its offset and length.
func (c *codec) match(data []byte, i int) (off, n int) {
	p := int(c.table[window(data[i:])]) - 1
	if p < 0 {
		return 0, 0
	}
	for p+n < len(c.dict) && i+n < len(data) && c.dict[p+n] == data[i+n] {
		n++
	}
	return p, n
}

// appendLiteral appends the ops of lit: its runs of hex digits packed, the rest raw.
func appendLiteral(out, lit []byte) []byte {
	raw := 0
	for i := 0; i < len(lit); {
		j := i
		for j < len(lit) && nibble(lit[j]) >= 0 {
			j++
		}
		if j-i >= minHex {
			out = appendRaw(out, lit[raw:i])
			out = appendHex(out, lit[i:j])
			raw = j
		}
		i = j + 1
	}
	return appendRaw(out, lit[raw:])
}

func appendRaw(out, b []byte) []byte {
	if len(b) == 0 {
		return out
	}
	return append(binary.AppendUvarint(out, uint64(len(b))<<2|opRaw), b...)
}

func appendHex(out, h []byte) []byte {
	op := uint64(opHex)
	for _, d := range h {
		if d >= 'A' && d <= 'F' {
			op = opHexUp
		}
	}
	out = binary.AppendUvarint(out, uint64(len(h))<<2|op)
	for j := 0; j < len(h); j += 2 {
		b := byte(nibble(h[j])) << 4
		if j+1 < len(h) {
			b |= byte(nibble(h[j+1]))
		}
		out = append(out, b)
	}
	if op == opHexUp {
		out = appendMask(out, h)
	}
	return out
}

// appendMask appends a bit per digit of h, set for an upper-case letter.
func appendMask(out, h []byte) []byte {
	for j := 0; j < len(h); j += 8 {
		var m byte
		for k, d := range h[j:min(j+8, len(h))] {
			if d >= 'A' && d <= 'F' {
				m |= 1 << k
			}
		}
		out = append(out, m)
	}
	return out
}

// nibble is the value of the hex digit d, or -1.
func nibble(d byte) int {
	switch {
	case d >= '0' && d <= '9':
		return int(d - '0')
	case d >= 'a' && d <= 'f':
		return int(d-'a') + 10
	case d >= 'A' && d <= 'F':
		return int(d-'A') + 10
	}
	return -1
}

var errCorrupt = fmt.Errorf("memory ledger: corrupt settlement: %w", ErrUnavailable)

// decode reverses encode.
func (c *codec) decode(s string) ([]byte, error) {
	switch {
	case s == "":
		return nil, nil
	case s[0] == tagRaw:
		return []byte(s[1:]), nil
	}
	in, out := []byte(s[1:]), make([]byte, 0, 2*len(s))
	for len(in) > 0 {
		h, k := binary.Uvarint(in)
		if k <= 0 || h>>2 > uint64(4*len(s)+len(c.dict)) {
			return nil, errCorrupt
		}
		var err error
		out, in, err = c.op(out, in[k:], h&3, int(h>>2))
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// op appends the output of one op of kind and length n, whose operands start in, and
// returns what follows them.
func (c *codec) op(out, in []byte, kind uint64, n int) ([]byte, []byte, error) {
	switch kind {
	case opRaw:
		if n > len(in) {
			return nil, nil, errCorrupt
		}
		return append(out, in[:n]...), in[n:], nil
	case opCopy:
		off, k := binary.Uvarint(in)
		if k <= 0 || off > uint64(len(c.dict)) || n > len(c.dict)-int(off) {
			return nil, nil, errCorrupt
		}
		return append(out, c.dict[off:int(off)+n]...), in[k:], nil
	}
	packed, masked := (n+1)/2, 0
	if kind == opHexUp {
		masked = (n + 7) / 8
	}
	if packed+masked > len(in) {
		return nil, nil, errCorrupt
	}
	for j := range n {
		v := in[j/2] >> (4 * (1 - j%2)) & 0xf
		d := "0123456789abcdef"[v]
		if masked > 0 && in[packed+j/8]&(1<<(j%8)) != 0 {
			d = "0123456789ABCDEF"[v]
		}
		out = append(out, d)
	}
	return out, in[packed+masked:], nil
}
