package main

import (
	"database/sql"
	"fmt"
	"net"
	"os"
	"path/filepath"

	_ "github.com/go-sql-driver/mysql"
	"github.com/pingcap/tidb/pkg/config"
	"github.com/pingcap/tidb/pkg/domain"
	"github.com/pingcap/tidb/pkg/kv"
	"github.com/pingcap/tidb/pkg/server"
	"github.com/pingcap/tidb/pkg/session"
	"github.com/pingcap/tidb/pkg/store/mockstore"
	"github.com/pingcap/tidb/pkg/util/logutil"
)

// txnSizeLimit is the transaction size limit tidbtest sets: TiDB's
// default, 100 MiB, would leave it unset (see startTiDB), so one byte less.
const txnSizeLimit = config.DefTxnTotalSizeLimit - 1

// tidb is one in-process TiDB server over an in-memory unistore.
type tidb struct {
	store  kv.Storage
	dom    *domain.Domain
	server *server.Server
	port   int
}

// startTiDB boots TiDB on a free port of 127.0.0.1 and returns once it
// accepts connections.
func startTiDB() (*tidb, error) {
	cfg := config.NewConfig()
	cfg.Host = "127.0.0.1"
	cfg.Port = 0
	cfg.Socket = ""
	cfg.Security.AutoTLS = false
	cfg.Status.ReportStatus = true
	cfg.Status.StatusHost = "127.0.0.1"
	cfg.Status.StatusPort = 0
	cfg.Log.Level = "error"
	// At the default transaction size limit TiDB meters each transaction's
	// write buffer against its session's memory tracker, and closing a
	// session that a KILL QUERY reached with such a buffer open panics in
	// that tracker outside any recover, which ends the process: the store
	// kills statements past their deadline and then drops the connection.
	// A limit set explicitly keeps the older size check and no tracker.
	cfg.Performance.TxnTotalSizeLimit = txnSizeLimit
	kv.TxnTotalSizeLimit.Store(txnSizeLimit)
	// TiDB writes its slow query log to the working directory otherwise.
	cfg.Log.SlowQueryFile = filepath.Join(os.TempDir(), "tidbtest-slow.log")
	config.StoreGlobalConfig(cfg)
	if err := logutil.InitLogger(cfg.Log.ToLogConfig()); err != nil {
		return nil, fmt.Errorf("tidb logger: %w", err)
	}
	// Without RunInGoTest a status port of 0 means TiDB's fixed default
	// port, and Run never signals that it is listening.
	server.RunInGoTest = true
	server.RunInGoTestChan = make(chan struct{})

	t := &tidb{}
	var err error
	if t.store, err = mockstore.NewMockStore(); err != nil {
		return nil, fmt.Errorf("unistore: %w", err)
	}
	if t.dom, err = session.BootstrapSession(t.store); err != nil {
		t.store.Close()
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	if t.server, err = server.NewServer(cfg, server.NewTiDBDriver(t.store)); err != nil {
		t.dom.Close()
		t.store.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	t.server.SetDomain(t.dom)
	t.dom.InfoSyncer().SetSessionManager(t.server)
	failed := make(chan error, 1)
	go func() { failed <- t.server.Run(t.dom) }()
	select {
	case <-server.RunInGoTestChan:
	case err := <-failed:
		t.Close()
		return nil, fmt.Errorf("server run: %w", err)
	}
	t.port = t.server.ListenAddr().(*net.TCPAddr).Port
	if err := t.commitForUnistore(); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// commitForUnistore sets, for every session, how transactions commit over
// unistore, the in-process storage engine, so that a snapshot sees each
// transaction whole, as TiKV keeps it with TiDB's defaults:
//
//   - async commit and one-phase commit off: unistore does not implement
//     the max-timestamp tracking that keeps a snapshot read consistent with
//     those commits (ngaut/unistore#510).
//   - the prewrite batches of a transaction one at a time, the primary's
//     first (tidb_committer_concurrency = 1): a reader that meets a
//     prewritten secondary while the primary still holds only its
//     pessimistic lock pushes that lock's min_commit_ts and reads past the
//     transaction, and unistore's prewrite of the primary drops the push
//     (TiKV keeps it), so the transaction could commit below the reader's
//     snapshot and show it one row and not another. A transaction's keys
//     fall in several batches once unistore splits a busy region.
//
// A deployment on TiKV keeps TiDB's defaults.
func (t *tidb) commitForUnistore() error {
	db, err := sql.Open("mysql", t.DSN())
	if err != nil {
		return err
	}
	defer db.Close()
	for _, q := range []string{
		"SET GLOBAL tidb_enable_async_commit = OFF",
		"SET GLOBAL tidb_enable_1pc = OFF",
		"SET GLOBAL tidb_committer_concurrency = 1",
	} {
		if _, err := db.Exec(q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// DSN is the go-sql-driver DSN of the server without a database name, the
// form FEED_TEST_MYSQL_DSN takes.
func (t *tidb) DSN() string { return fmt.Sprintf("root@tcp(127.0.0.1:%d)/", t.port) }

// Close stops the server, the domain and the store.
func (t *tidb) Close() {
	if t.server != nil {
		t.server.Close()
	}
	if t.dom != nil {
		t.dom.Close()
	}
	if t.store != nil {
		t.store.Close()
	}
}
