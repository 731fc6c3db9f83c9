//go:build linux

package agent

import "bytes"

// blankLine is how execd reports an empty line: an event with empty text
// would be indistinguishable from no output.
var blankLine = []byte("\n")

// maxRetainedPartial bounds the capacity kept for partial lines between
// reads, so one huge line does not pin its buffer for the command's lifetime.
const maxRetainedPartial = 1 << 20

// lineSplitter cuts a byte stream into lines the way execd does: "\n" and
// "\r" both end a line, "\r\n" counts once, terminators are stripped, an
// empty line is reported as "\n", and lines have no length limit. Bytes
// after the last terminator wait for more input or for flush.
//
// With keep set it cuts as execd 1.1.1 does (its #2033): each line keeps
// its terminator ("\n", "\r" or "\r\n"), so that the lines joined are the
// stream's bytes exactly, blank lines and a final fragment included.
type lineSplitter struct {
	keep    bool
	partial []byte
	lastCR  bool // the previous terminator was '\r'
}

// next returns the next line of p and the unconsumed rest of p. When p holds
// no further terminator, next keeps the remainder and returns ok == false.
// The returned line is valid until the next call.
func (l *lineSplitter) next(p []byte) (line, rest []byte, ok bool) {
	if l.keep {
		return l.nextKept(p)
	}
	for {
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			if len(p) > 0 {
				l.partial = append(l.partial, p...)
				l.lastCR = false
			}
			return nil, nil, false
		}
		c := p[i]
		line = p[:i]
		if len(l.partial) > 0 {
			l.partial = append(l.partial, line...)
			line = l.partial
			l.resetPartial()
		}
		skip := len(line) == 0 && c == '\n' && l.lastCR // second half of "\r\n"
		l.lastCR = c == '\r'
		p = p[i+1:]
		if skip {
			continue
		}
		if len(line) == 0 {
			line = blankLine
		}
		return line, p, true
	}
}

// nextKept is next for keep: a line ends after "\n", or after "\r" unless
// "\n" follows, which a "\r" at the end of p waits to see.
func (l *lineSplitter) nextKept(p []byte) (line, rest []byte, ok bool) {
	if n := len(l.partial); n > 0 && l.partial[n-1] == '\r' {
		switch {
		case len(p) == 0:
			return nil, nil, false
		case p[0] == '\n':
			l.partial = append(l.partial, '\n')
			p = p[1:]
		}
		line = l.partial
		l.resetPartial()
		return line, p, true
	}
	i := bytes.IndexAny(p, "\r\n")
	switch {
	case i < 0 || p[i] == '\r' && i == len(p)-1:
		l.partial = append(l.partial, p...)
		return nil, nil, false
	case p[i] == '\r' && p[i+1] == '\n':
		i++
	}
	line = p[:i+1]
	if len(l.partial) > 0 {
		l.partial = append(l.partial, line...)
		line = l.partial
		l.resetPartial()
	}
	return line, p[i+1:], true
}

// flush returns the unterminated remainder, if any, and forgets it.
func (l *lineSplitter) flush() []byte {
	line := l.partial
	l.resetPartial()
	return line
}

// resetPartial empties partial. The returned line may still alias its
// backing array, which is reused only by the next call to next.
func (l *lineSplitter) resetPartial() {
	if cap(l.partial) > maxRetainedPartial {
		l.partial = nil
		return
	}
	l.partial = l.partial[:0]
}
