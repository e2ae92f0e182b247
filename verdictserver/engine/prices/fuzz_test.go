package prices

import (
	"bytes"
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
)

// roundAnswer is an ethereum.ContractCaller whose decimals() answers dec and whose latestRoundData answers
// round: a feed that returns anything (fault injection).
type roundAnswer struct {
	dec   []byte
	round []byte
}

func (r roundAnswer) CallContract(_ context.Context, msg ethereum.CallMsg, _ *big.Int) ([]byte, error) {
	if bytes.Equal(msg.Data[:4], aggregator.Methods["decimals"].ID) {
		return r.dec, nil
	}
	return r.round, nil
}

func word(v int64) []byte { return common.BigToHash(big.NewInt(v)).Bytes() }

// FuzzFeedAnswer: whatever a feed returns, Quote never panics, and a price it gives is
// positive, from a complete round.
func FuzzFeedAnswer(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	good := bytes.Join([][]byte{word(1), word(2e8), word(now.Unix()), word(now.Unix()), word(1)}, nil)
	f.Add(word(8), good)
	f.Add(word(8), bytes.Join([][]byte{word(1), word(0), word(1), word(1), word(1)}, nil))
	f.Add(word(8), bytes.Join([][]byte{word(1), common.MaxHash.Bytes(), word(1), word(1), word(1)}, nil))
	f.Add(word(78), good)
	f.Add(word(8), good[:100])
	f.Add([]byte{}, good)
	f.Fuzz(func(t *testing.T, dec, round []byte) {
		asset := common.HexToAddress("0x00000000000000000000000000000000000a55e7")
		feeds, err := NewFeeds(FeedOptions{Callers: map[int64]ethereum.ContractCaller{1: roundAnswer{dec, round}}, Now: func() time.Time { return now }},
			Feed{ChainID: 1, Asset: asset, Address: common.HexToAddress("0x000000000000000000000000000000000000feed")})
		if err != nil {
			t.Fatal(err)
		}
		q, err := feeds.Quote(context.Background(), 1, asset)
		if err == nil && (q.USD == nil || q.USD.Sign() <= 0 || q.UpdatedAt.Unix() <= 0 || q.UpdatedAt.After(now.Add(maxFutureSkew)) || q.Decimals < 0 || q.Decimals > 77) {
			t.Fatalf("accepted %+v from decimals %x, round %x", q, dec, round)
		}
	})
}
