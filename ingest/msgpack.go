package ingest

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// The decoder's scalar reads, straight off the payload at dc.pos. They
// replace a msgpack.Decoder over a bytes.Reader, whose every seek reset the
// reader and whose reads went through an io.Reader: that was half of
// ingest's CPU per one-event message. Each read checks its bytes are there
// (io.ErrUnexpectedEOF otherwise, which fail reports as truncation) and
// leaves dc.pos after the value; callers have checked the code's kind.

// need returns the n bytes at dc.pos and advances past them.
func (dc *decoder) need(n int) ([]byte, error) {
	if n < 0 || n > len(dc.buf)-dc.pos {
		return nil, io.ErrUnexpectedEOF
	}
	b := dc.buf[dc.pos : dc.pos+n]
	dc.pos += n
	return b, nil
}

// code consumes the code byte.
func (dc *decoder) code() (byte, error) {
	b, err := dc.need(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

// length reads the big-endian length of width 1, 2 or 4 bytes.
func (dc *decoder) length(width int) (int, error) {
	b, err := dc.need(width)
	if err != nil {
		return 0, err
	}
	switch width {
	case 1:
		return int(b[0]), nil
	case 2:
		return int(binary.BigEndian.Uint16(b)), nil
	}
	return int(binary.BigEndian.Uint32(b)), nil
}

// readArrayLen reads an array header.
func (dc *decoder) readArrayLen() (int, error) {
	c, err := dc.code()
	if err != nil {
		return 0, err
	}
	switch {
	case msgpcode.IsFixedArray(c):
		return int(c & msgpcode.FixedArrayMask), nil
	case c == msgpcode.Array16:
		return dc.length(2)
	case c == msgpcode.Array32:
		return dc.length(4)
	}
	return 0, fmt.Errorf("msgpack: invalid code=%x decoding array length", c)
}

// readMapLen reads a map header.
func (dc *decoder) readMapLen() (int, error) {
	c, err := dc.code()
	if err != nil {
		return 0, err
	}
	switch {
	case msgpcode.IsFixedMap(c):
		return int(c & msgpcode.FixedMapMask), nil
	case c == msgpcode.Map16:
		return dc.length(2)
	case c == msgpcode.Map32:
		return dc.length(4)
	}
	return 0, fmt.Errorf("msgpack: invalid code=%x decoding map length", c)
}

// readBytesLen reads a str or bin header.
func (dc *decoder) readBytesLen() (int, error) {
	c, err := dc.code()
	if err != nil {
		return 0, err
	}
	switch {
	case msgpcode.IsFixedString(c):
		return int(c & msgpcode.FixedStrMask), nil
	case c == msgpcode.Str8 || c == msgpcode.Bin8:
		return dc.length(1)
	case c == msgpcode.Str16 || c == msgpcode.Bin16:
		return dc.length(2)
	case c == msgpcode.Str32 || c == msgpcode.Bin32:
		return dc.length(4)
	}
	return 0, fmt.Errorf("msgpack: invalid code=%x decoding string/bytes length", c)
}

// readUint reads an unsigned integer (positive fixnum, uint8..uint64).
func (dc *decoder) readUint() (uint64, error) {
	c, err := dc.code()
	if err != nil {
		return 0, err
	}
	if c <= msgpcode.PosFixedNumHigh {
		return uint64(c), nil
	}
	var b []byte
	switch c {
	case msgpcode.Uint8:
		b, err = dc.need(1)
		if err == nil {
			return uint64(b[0]), nil
		}
	case msgpcode.Uint16:
		b, err = dc.need(2)
		if err == nil {
			return uint64(binary.BigEndian.Uint16(b)), nil
		}
	case msgpcode.Uint32:
		b, err = dc.need(4)
		if err == nil {
			return uint64(binary.BigEndian.Uint32(b)), nil
		}
	case msgpcode.Uint64:
		b, err = dc.need(8)
		if err == nil {
			return binary.BigEndian.Uint64(b), nil
		}
	default:
		return 0, fmt.Errorf("msgpack: invalid code=%x decoding uint64", c)
	}
	return 0, err
}

// readInt reads a signed integer (negative fixnum, int8..int64).
func (dc *decoder) readInt() (int64, error) {
	c, err := dc.code()
	if err != nil {
		return 0, err
	}
	if c >= msgpcode.NegFixedNumLow {
		return int64(int8(c)), nil
	}
	var b []byte
	switch c {
	case msgpcode.Int8:
		b, err = dc.need(1)
		if err == nil {
			return int64(int8(b[0])), nil
		}
	case msgpcode.Int16:
		b, err = dc.need(2)
		if err == nil {
			return int64(int16(binary.BigEndian.Uint16(b))), nil
		}
	case msgpcode.Int32:
		b, err = dc.need(4)
		if err == nil {
			return int64(int32(binary.BigEndian.Uint32(b))), nil
		}
	case msgpcode.Int64:
		b, err = dc.need(8)
		if err == nil {
			return int64(binary.BigEndian.Uint64(b)), nil
		}
	default:
		return 0, fmt.Errorf("msgpack: invalid code=%x decoding int64", c)
	}
	return 0, err
}

// readFloat reads a float32 or float64.
func (dc *decoder) readFloat() (float64, error) {
	c, err := dc.code()
	if err != nil {
		return 0, err
	}
	switch c {
	case msgpcode.Float:
		b, err := dc.need(4)
		if err != nil {
			return 0, err
		}
		return float64(math.Float32frombits(binary.BigEndian.Uint32(b))), nil
	case msgpcode.Double:
		b, err := dc.need(8)
		if err != nil {
			return 0, err
		}
		return math.Float64frombits(binary.BigEndian.Uint64(b)), nil
	}
	return 0, fmt.Errorf("msgpack: invalid code=%x decoding float64", c)
}
