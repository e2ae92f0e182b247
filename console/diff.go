package console

// maxDiffLines bounds each side of a diff: a longer document is shown as removed and
// added whole, which keeps the table of common subsequences small.
const maxDiffLines = 2000

// diffLine is one line of a diff: Op is ' ' (in both), '-' (only in a) or '+' (only in b).
type diffLine struct {
	Op   string
	Text string
}

// diffLines is the line diff of a and b along a longest common subsequence.
func diffLines(a, b []string) []diffLine {
	if len(a) > maxDiffLines || len(b) > maxDiffLines {
		return append(mark("-", a), mark("+", b)...)
	}
	// lcs[i][j] is the length of the longest common subsequence of a[i:] and b[j:].
	lcs := make([][]int32, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []diffLine
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			out = append(out, diffLine{" ", a[i]})
			i, j = i+1, j+1
		case lcs[i+1][j] >= lcs[i][j+1]:
			out = append(out, diffLine{"-", a[i]})
			i++
		default:
			out = append(out, diffLine{"+", b[j]})
			j++
		}
	}
	return append(append(out, mark("-", a[i:])...), mark("+", b[j:])...)
}

func mark(op string, lines []string) []diffLine {
	out := make([]diffLine, len(lines))
	for i, l := range lines {
		out[i] = diffLine{op, l}
	}
	return out
}
