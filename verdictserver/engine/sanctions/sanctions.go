// Package sanctions loads the sanctions list the verdict engine screens addresses against
// (docs/policy.md#sanctions-list): a text file of one address per line, or OFAC's
// SDN_ADVANCED.XML, from which it takes the EVM addresses of every feature typed
// "Digital Currency Address - <TICKER>". A List is immutable and safe for concurrent use.
package sanctions

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// List is a dated set of sanctioned addresses.
type List struct {
	name   string
	asOf   time.Time
	format string
	addrs  map[common.Address]struct{}

	// the file Load read: its modification time and size, to tell a changed file
	fileMod  time.Time
	fileSize int64
}

// Name is the list's source name for evidence: "sanctions:" and the file's base name.
func (l *List) Name() string { return l.name }

// AsOf is the list's date: its publication date when the file carries one (an OFAC
// DateOfIssue, a "# generatedAt:" line), else the file's modification time.
func (l *List) AsOf() time.Time { return l.asOf }

// Format is "text" or "ofac-sdn-xml".
func (l *List) Format() string { return l.format }

// SameFile reports whether fi (a stat of the list's file) has the modification time and size
// the file had when Load read it: a scheduled refresh skips a file that did not change.
func (l *List) SameFile(fi os.FileInfo) bool {
	return l != nil && !l.fileMod.IsZero() && fi.ModTime().Equal(l.fileMod) && fi.Size() == l.fileSize
}

// Len is the number of distinct addresses.
func (l *List) Len() int { return len(l.addrs) }

// Contains reports whether a is listed.
func (l *List) Contains(a common.Address) bool {
	if l == nil {
		return false
	}
	_, ok := l.addrs[a]
	return ok
}

// New builds a list from addresses, for callers that get them elsewhere.
func New(name string, asOf time.Time, addrs []common.Address) *List {
	l := &List{name: name, asOf: asOf, format: "text", addrs: make(map[common.Address]struct{}, len(addrs))}
	for _, a := range addrs {
		l.addrs[a] = struct{}{}
	}
	return l
}

// maxFileBytes bounds a list file; OFAC's full advanced XML is about 100 MB.
const maxFileBytes = 1 << 30

// Load reads the list at path, in either format: a file whose first non-blank byte is '<'
// is OFAC XML, anything else is text.
func Load(path string) (*List, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("sanctions list: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("sanctions list: %w", err)
	}
	if st.Size() > maxFileBytes {
		return nil, fmt.Errorf("sanctions list %s: larger than 1 GiB", filepath.Base(path))
	}
	name := "sanctions:" + filepath.Base(path)
	br := bufio.NewReaderSize(f, 64<<10)
	head, _ := br.Peek(512)
	if b := bytes.TrimLeft(head, " \t\r\n\ufeff"); len(b) > 0 && b[0] == '<' {
		l, err := ParseSDN(br, name, st.ModTime())
		if err != nil {
			return nil, fmt.Errorf("sanctions list %s: %w", filepath.Base(path), err)
		}
		l.fileMod, l.fileSize = st.ModTime(), st.Size()
		return l, nil
	}
	l, err := ParseText(br, name, st.ModTime())
	if err != nil {
		return nil, fmt.Errorf("sanctions list %s: %w", filepath.Base(path), err)
	}
	l.fileMod, l.fileSize = st.ModTime(), st.Size()
	return l, nil
}

// ParseText reads one address per line; '#' starts a comment, blank lines are skipped. A
// comment "# generatedAt: <RFC 3339>" dates the list; otherwise modTime does. A line that
// is not a 20-byte hex address is an error naming its line number.
func ParseText(r io.Reader, name string, modTime time.Time) (*List, error) {
	l := &List{name: name, asOf: modTime, format: "text", addrs: map[common.Address]struct{}{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if n == 1 {
			line = strings.TrimPrefix(line, "\ufeff")
		}
		if body, comment, ok := strings.Cut(line, "#"); ok {
			if k, v, ok := strings.Cut(strings.TrimSpace(comment), ":"); ok && strings.EqualFold(strings.TrimSpace(k), "generatedAt") {
				t, err := time.Parse(time.RFC3339, strings.TrimSpace(v))
				if err != nil {
					return nil, fmt.Errorf("line %d: generatedAt is not an RFC 3339 time", n)
				}
				l.asOf = t
			}
			line = body
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if !isAddress(line) {
			return nil, fmt.Errorf("line %d: not a 20-byte hex address", n)
		}
		l.addrs[common.HexToAddress(line)] = struct{}{}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", n+1, err)
	}
	return l, nil
}

func isAddress(s string) bool {
	return len(s) == 42 && (s[:2] == "0x" || s[:2] == "0X") && common.IsHexAddress(s)
}

// featurePrefix names the OFAC feature types that carry digital currency addresses.
const featurePrefix = "Digital Currency Address - "

// ParseSDN reads OFAC's SDN_ADVANCED.XML as a stream: the FeatureType reference values
// whose text starts with "Digital Currency Address - ", and the VersionDetail values of
// every Feature of those types that are EVM addresses (other chains' addresses are
// skipped). The list is dated by the file's DateOfIssue, else by modTime. Namespaces are
// ignored, as OFAC has changed its namespace URI before.
func ParseSDN(r io.Reader, name string, modTime time.Time) (*List, error) {
	d := xml.NewDecoder(r)
	var (
		path        []string
		featureType = map[string]bool{}     // FeatureType ID -> digital currency address
		byType      = map[string][]string{} // FeatureTypeID -> EVM address values
		curType     string                  // FeatureTypeID of the enclosing Feature
		ftID        string                  // ID of the FeatureType being read
		text        strings.Builder
		date        [3]int
		sawSDN      bool
	)
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("ofac xml: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			path = append(path, t.Name.Local)
			text.Reset()
			switch t.Name.Local {
			case "Sanctions":
				sawSDN = true
			case "FeatureType":
				ftID = attr(t, "ID")
			case "Feature":
				curType = attr(t, "FeatureTypeID")
			}
		case xml.CharData:
			if text.Len() < 4096 {
				text.Write(t)
			}
		case xml.EndElement:
			v := strings.TrimSpace(text.String())
			switch t.Name.Local {
			case "FeatureType":
				if strings.HasPrefix(v, featurePrefix) && ftID != "" {
					featureType[ftID] = true
				}
			case "Feature":
				curType = ""
			case "VersionDetail":
				if curType != "" && isAddress(v) {
					byType[curType] = append(byType[curType], v)
				}
			case "Year", "Month", "Day":
				if len(path) >= 2 && path[len(path)-2] == "DateOfIssue" {
					n, _ := strconv.Atoi(v)
					date[map[string]int{"Year": 0, "Month": 1, "Day": 2}[t.Name.Local]] = n
				}
			}
			if len(path) > 0 {
				path = path[:len(path)-1]
			}
			text.Reset()
		}
	}
	if !sawSDN {
		return nil, errors.New("ofac xml: no Sanctions root element")
	}
	if len(featureType) == 0 {
		return nil, errors.New("ofac xml: no \"Digital Currency Address\" feature types")
	}
	l := &List{name: name, asOf: modTime, format: "ofac-sdn-xml", addrs: map[common.Address]struct{}{}}
	if date[0] > 0 && date[1] >= 1 && date[1] <= 12 && date[2] >= 1 && date[2] <= 31 {
		l.asOf = time.Date(date[0], time.Month(date[1]), date[2], 0, 0, 0, 0, time.UTC)
	}
	for id, vals := range byType {
		if !featureType[id] {
			continue
		}
		for _, v := range vals {
			l.addrs[common.HexToAddress(v)] = struct{}{}
		}
	}
	return l, nil
}

func attr(e xml.StartElement, name string) string {
	for _, a := range e.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}
