package service

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/feedhq/feed/store"
)

// ConsoleSessionTTL is how long an operator's console session lasts from
// its sign-in.
const ConsoleSessionTTL = 12 * time.Hour

// An operator's console session is a row on the database of its random id
// (store.ConsoleSession): the cookie is "<id>.<secret>", 64 random bits
// that place the row and 256 that prove it, of which the row keeps only a
// hash, so reading the table opens no console. The row also keeps a MAC of
// the token the session signed in with: a changed token ends every session.

// StartConsoleSession stores a new session signed in with the token whose
// MAC is tokenMAC and returns its cookie value.
func (s *Service) StartConsoleSession(ctx context.Context, tokenMAC []byte) (string, error) {
	var b [8 + 32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	id := binary.BigEndian.Uint64(b[:8]) | 1
	secret := b[8:]
	hash := sha256.Sum256(secret)
	now := s.now()
	_, err := s.store.CreateConsoleSession(store.WithClass(ctx, store.Writes), store.ConsoleSession{
		ID: id, SecretHash: hash[:], TokenMAC: tokenMAC, CreatedAt: now.UnixMilli(), ExpiresAt: now.Add(ConsoleSessionTTL).UnixMilli(),
	}, now.UnixMilli())
	if err != nil {
		return "", err
	}
	return strconv.FormatUint(id, 10) + "." + hex.EncodeToString(secret), nil
}

// CheckConsoleSession says whether cookie names a session signed in with
// the token whose MAC is tokenMAC that has not been ended and whose expiry
// has not passed.
func (s *Service) CheckConsoleSession(ctx context.Context, cookie string, tokenMAC []byte) (bool, error) {
	id, secret, ok := parseConsoleCookie(cookie)
	if !ok {
		return false, nil
	}
	cs, found, err := s.store.GetConsoleSession(store.WithClass(ctx, store.Reads), id)
	if err != nil || !found {
		return false, err
	}
	hash := sha256.Sum256(secret)
	return subtle.ConstantTimeCompare(hash[:], cs.SecretHash) == 1 &&
		subtle.ConstantTimeCompare(tokenMAC, cs.TokenMAC) == 1 &&
		s.now().UnixMilli() <= cs.ExpiresAt, nil
}

// EndConsoleSession deletes the session cookie names, if any.
func (s *Service) EndConsoleSession(ctx context.Context, cookie string) error {
	id, _, ok := parseConsoleCookie(cookie)
	if !ok {
		return nil
	}
	return s.store.DeleteConsoleSession(store.WithClass(ctx, store.Writes), id)
}

// parseConsoleCookie reads "<id>.<secret>"; ok is false for anything else.
func parseConsoleCookie(cookie string) (id uint64, secret []byte, ok bool) {
	idText, secretText, found := strings.Cut(cookie, ".")
	id, err := strconv.ParseUint(idText, 10, 64)
	if !found || err != nil || id == 0 || len(secretText) != 64 {
		return 0, nil, false
	}
	secret, err = hex.DecodeString(secretText)
	return id, secret, err == nil
}
