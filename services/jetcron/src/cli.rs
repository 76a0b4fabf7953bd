//! Command line: one subcommand per service, `all` for the single-machine
//! default, `req` for machines without the `nats` CLI, and the client
//! commands (`jobs`, `runs`, `apply`, `diff`, `export`, `completion`) whose
//! arguments live with their code in `jetcron-client`. Every option also
//! reads a `JETCRON_*` environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use jetcron_client::apply::{ApplyArgs, DiffArgs};
use jetcron_client::commands::jobs::JobsCommand;
use jetcron_client::commands::runs::RunsCommand;
use jetcron_client::commands::{positive_duration, ClientArgs};
use jetcron_client::crontab_import::ImportArgs;
use jetcron_client::export::ExportArgs;
use jetcron_io::nats_connect::{NatsAuthOptions, ServerList};
use jetcron_io::telemetry::LogFormat;

#[derive(Debug, Parser)]
#[command(
    name = "jetcron",
    version,
    about = "A distributed job scheduler on NATS JetStream"
)]
pub struct Cli {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Watch the job bucket and publish due events.
    Ticker(TickerArgs),
    /// Pull due events and run their targets.
    Executor(ExecutorArgs),
    /// Copy run events into ClickHouse.
    Projector(ProjectorArgs),
    /// Serve the NATS API and the HTTP query API.
    Gateway(GatewayArgs),
    /// Run ticker, executor, projector and gateway in this one process.
    All(Box<AllArgs>),
    /// Send a NATS request and print the reply (a stand-in for `nats req`).
    Req(ReqArgs),
    /// Move jetcron's streams and buckets to another replica count (R1 to
    /// R3 when a single node grows into a cluster), keeping every message.
    Migrate(MigrateArgs),
    /// Print, as JSON, the `permissions` of a nats-server user for a team's
    /// role in its namespace (paste it into `users`; docs/security.md).
    NatsPermissions(NatsPermissionsArgs),
    /// Manage the console's local users (for installs without an identity
    /// provider): add, change a password, remove, list. Passwords are read
    /// from the terminal, never from the command line.
    #[command(subcommand)]
    Users(UsersCommand),
    /// List, show, put, delete, pause, resume, trigger and backfill jobs,
    /// and preview schedules, through the API (NATS, or HTTP with --http).
    Jobs {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: JobsCommand,
    },
    /// List and show runs, read their output, kill them.
    Runs {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: RunsCommand,
    },
    /// Make the stored jobs match job files (JSON or YAML): create and
    /// update, with --prune delete. Exit 0: nothing to do; 2: changes
    /// applied (or planned with --dry-run); 1: error.
    Apply {
        #[command(flatten)]
        client: ClientArgs,
        #[command(flatten)]
        args: ApplyArgs,
    },
    /// Show, field by field, how job files differ from the stored jobs.
    /// Exit 0: no difference; 2: differences; 1: error.
    Diff {
        #[command(flatten)]
        client: ClientArgs,
        #[command(flatten)]
        args: DiffArgs,
    },
    /// Write every stored job (of a namespace) as files `apply` takes back.
    Export {
        #[command(flatten)]
        client: ClientArgs,
        #[command(flatten)]
        args: ExportArgs,
    },
    /// Bring a crontab over as jobs with shell targets (a user's crontab,
    /// `/etc/crontab` or an `/etc/cron.d` file); lines with no meaning here
    /// are refused one by one. Exit codes as `apply`'s.
    ImportCrontab {
        #[command(flatten)]
        client: ClientArgs,
        #[command(flatten)]
        args: ImportArgs,
    },
    /// Print a shell completion script (bash, zsh or fish): e.g.
    /// `source <(jetcron completion bash)`.
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

impl Command {
    /// Whether it is a client of a running jetcron (or prints completion),
    /// rather than a service or an operator's one-shot command.
    pub fn is_client(&self) -> bool {
        matches!(
            self,
            Command::Jobs { .. }
                | Command::Runs { .. }
                | Command::Apply { .. }
                | Command::Diff { .. }
                | Command::Export { .. }
                | Command::ImportCrontab { .. }
                | Command::Completion { .. }
        )
    }
}

#[derive(Debug, Subcommand)]
pub enum UsersCommand {
    /// Add a user; the password is asked twice (or read as one line from
    /// standard input when it is not a terminal).
    Add(UserName),
    /// Give a user a new password (their console sessions end).
    Passwd(UserName),
    /// Remove a user (their console sessions end).
    Remove(UserName),
    /// List the users, without their hashes.
    List,
}

#[derive(Debug, Args)]
pub struct UserName {
    /// The user's name: lower-case letters, digits, '-', '_' and dots
    /// between them, at most 64. Give it roles with a binding of
    /// `user:<name>` (docs/security.md).
    pub name: String,
}

#[derive(Debug, Clone, Args)]
pub struct CommonArgs {
    /// NATS server URL(s), comma separated (`nats://a:4222,nats://b:4222`):
    /// every server of a cluster that this process may use. The client
    /// connects to any that answers and moves to another when it goes away.
    #[arg(
        long,
        env = "JETCRON_NATS_URL",
        default_value = "nats://127.0.0.1:4222",
        value_parser = parse_server_list,
        global = true
    )]
    pub nats_url: ServerList,
    /// NATS user (with --nats-password): the role of this service in
    /// infra/nats/roles.conf (ticker, executor, projector, gateway, …).
    #[arg(long, env = "JETCRON_NATS_USER", global = true)]
    pub nats_user: Option<String>,
    /// Password of --nats-user.
    #[arg(
        long,
        env = "JETCRON_NATS_PASSWORD",
        global = true,
        hide_env_values = true
    )]
    pub nats_password: Option<String>,
    /// NATS authentication token (a server with `authorization { token }`).
    #[arg(
        long,
        env = "JETCRON_NATS_TOKEN",
        global = true,
        hide_env_values = true
    )]
    pub nats_token: Option<String>,
    /// NATS credentials file (user JWT + nkey seed, as `nsc` writes them).
    #[arg(long, env = "JETCRON_NATS_CREDS", global = true)]
    pub nats_creds: Option<PathBuf>,
    /// File holding a user nkey seed (`SU…`), for `nkey:` users of the server config.
    #[arg(long, env = "JETCRON_NATS_NKEY", global = true)]
    pub nats_nkey: Option<PathBuf>,
    /// PEM file of the CA that signed the NATS server certificate (implies --nats-tls-required).
    #[arg(long, env = "JETCRON_NATS_TLS_CA", global = true)]
    pub nats_tls_ca: Option<PathBuf>,
    /// PEM client certificate, for a server that verifies clients (needs --nats-tls-key).
    #[arg(long, env = "JETCRON_NATS_TLS_CERT", global = true)]
    pub nats_tls_cert: Option<PathBuf>,
    /// PEM private key of --nats-tls-cert.
    #[arg(long, env = "JETCRON_NATS_TLS_KEY", global = true)]
    pub nats_tls_key: Option<PathBuf>,
    /// Refuse to talk to NATS without TLS.
    #[arg(long, env = "JETCRON_NATS_TLS_REQUIRED", global = true)]
    pub nats_tls_required: bool,
    /// ClickHouse HTTP URL.
    #[arg(
        long,
        env = "JETCRON_CLICKHOUSE_URL",
        default_value = "http://127.0.0.1:8123",
        global = true
    )]
    pub clickhouse_url: String,
    #[arg(long, env = "JETCRON_CLICKHOUSE_USER", global = true)]
    pub clickhouse_user: Option<String>,
    #[arg(
        long,
        env = "JETCRON_CLICKHOUSE_PASSWORD",
        global = true,
        hide_env_values = true
    )]
    pub clickhouse_password: Option<String>,
    /// Who makes the ClickHouse tables: `single` (jetcron applies
    /// schemas/clickhouse/ at start), `replicated` (the operator applied
    /// schemas/clickhouse/replicated/ ON CLUSTER; jetcron waits until every
    /// table is there with a Replicated engine), or `none` (not checked).
    #[arg(
        long,
        env = "JETCRON_CLICKHOUSE_SCHEMA",
        default_value = "single",
        global = true
    )]
    pub clickhouse_schema: jetcron_io::clickhouse_schema::SchemaMode,
    /// Replicas of the streams and bucket jetcron creates (3 on a NATS cluster).
    #[arg(long, env = "JETCRON_REPLICAS", default_value_t = 1, global = true)]
    pub replicas: usize,
    /// How often each NATS connection pings its server when nothing else
    /// comes from it; three unanswered and the connection moves to another
    /// server (a hung server is left within about three of these).
    #[arg(long, env = "JETCRON_NATS_PING_INTERVAL", default_value = "2s", value_parser = humantime::parse_duration, global = true)]
    pub nats_ping_interval: Duration,
    /// Most this host's clock may be off from the NATS servers' (read from
    /// JetStream's answers every 2 s). Off by more, a ticker takes no shard
    /// and an executor calls no fire until it is back, and `/readyz` says
    /// so: no fire is called early or stored early because of a skewed host.
    #[arg(long, env = "JETCRON_MAX_CLOCK_OFFSET", default_value = "500ms", value_parser = humantime::parse_duration, global = true)]
    pub max_clock_offset: Duration,
    /// Log format: text or json.
    #[arg(
        long,
        env = "JETCRON_LOG_FORMAT",
        default_value = "text",
        global = true
    )]
    pub log_format: LogFormat,
    /// Serve Prometheus metrics on this address (`/metrics`); the gateway
    /// serves them on its own HTTP address anyway.
    #[arg(long, env = "JETCRON_METRICS_ADDR", global = true)]
    pub metrics_addr: Option<SocketAddr>,
}

fn parse_server_list(text: &str) -> Result<ServerList, String> {
    ServerList::parse(text).map_err(|e| e.to_string())
}

impl CommonArgs {
    /// A connection of a one-shot command (`jetcron req`, `migrate`,
    /// `users`), named `name`, with these servers and credentials.
    pub async fn connect_command(&self, name: &str) -> anyhow::Result<async_nats::Client> {
        self.connect_with_inbox(name, None).await
    }

    /// [`CommonArgs::connect_command`] with replies on `inbox_prefix` (a
    /// team's user, whose permissions allow only its namespace's inboxes).
    pub async fn connect_with_inbox(
        &self,
        name: &str,
        inbox_prefix: Option<String>,
    ) -> anyhow::Result<async_nats::Client> {
        use anyhow::Context as _;
        let auth = self.nats_auth();
        let mut options = auth.connect_options().context("NATS connection options")?;
        if let Some(prefix) = inbox_prefix {
            options = options.custom_inbox_prefix(prefix);
        }
        options
            .name(name)
            .connect(self.nats_url.servers())
            .await
            .with_context(|| format!("connect to {} with {}", self.nats_url, auth.describe()))
    }

    /// Credentials and TLS settings of the NATS connection.
    pub fn nats_auth(&self) -> NatsAuthOptions {
        NatsAuthOptions {
            user: self.nats_user.clone(),
            password: self.nats_password.clone(),
            token: self.nats_token.clone(),
            creds_file: self.nats_creds.clone(),
            nkey_seed_file: self.nats_nkey.clone(),
            tls_ca_file: self.nats_tls_ca.clone(),
            tls_cert_file: self.nats_tls_cert.clone(),
            tls_key_file: self.nats_tls_key.clone(),
            require_tls: self.nats_tls_required,
        }
    }
}

#[derive(Debug, Args, Clone)]
pub struct TickerArgs {
    /// Name of this replica in shard leases (default: <hostname>-<pid>-<random>).
    #[arg(long, env = "JETCRON_REPLICA_ID")]
    pub replica_id: Option<String>,
    /// A shard lease not renewed for this long is taken over by another replica.
    #[arg(long, env = "JETCRON_LEASE_TTL", default_value = "5s", value_parser = humantime::parse_duration)]
    pub lease_ttl: Duration,
    /// How often leases are renewed and watermarks checkpointed.
    #[arg(long, env = "JETCRON_LEASE_RENEW", default_value = "1s", value_parser = humantime::parse_duration)]
    pub lease_renew: Duration,
    /// Fires at most this late after a failover or restart are all emitted;
    /// older ones follow each job's misfire policy.
    #[arg(long, env = "JETCRON_LATE_THRESHOLD", default_value = "60s", value_parser = humantime::parse_duration)]
    pub late_threshold: Duration,
    /// Store each fire this long before its time; executors hold it until
    /// then, so a NATS leader election at the scheduled instant delays
    /// nothing. A change to a job applies to fires further away than this; a
    /// delete or pause kills the fires already handed out. Default: 1.5s
    /// with --replicas 1 (calls of an instant are built ahead and sent
    /// together), 10s on a cluster (elections take 4-9 s). At most 1m.
    #[arg(long, env = "JETCRON_LOOKAHEAD", value_parser = humantime::parse_duration)]
    pub lookahead: Option<Duration>,
    /// A ticker that cannot get due events stored for this long hands its
    /// shards to other replicas (which may reach a NATS node it cannot).
    /// Longer than back-to-back elections (each 4-9 s), which stall every
    /// replica alike.
    #[arg(long, env = "JETCRON_PUBLISH_STALL_LIMIT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub publish_stall_limit: Duration,
    /// Write a planned shard that changed to its snapshot (object store
    /// jetcron_ticker_snapshots) at most this often; a replica taking the
    /// shard over reads it and the bucket's changes since, instead of the
    /// whole bucket. 0s: no snapshots written or read.
    #[arg(long, env = "JETCRON_SNAPSHOT_EVERY", default_value = "30s", value_parser = humantime::parse_duration)]
    pub snapshot_every: Duration,
}

/// The lookahead when none is given. On one node 1.5 s: executors hold the
/// fires, build their calls and record their starts before the instant, and
/// the ticker stores the next second's fires half a second away from the
/// calls of this one. On a cluster 10 s, longer than nats-server's
/// elections (4-9 s).
pub fn default_lookahead(replicas: usize) -> Duration {
    if replicas > 1 {
        Duration::from_secs(10)
    } else {
        Duration::from_millis(1500)
    }
}

/// The executors' ack wait when none is given: the default lookahead (how
/// long a fire is held before its instant) and 3 s. A fire held by an
/// executor that dies or stalls comes to another when its ack wait runs out,
/// counted from when it was pulled: about 3 s after its instant. (With 5 s
/// more, the fires a paused executor held were called 5.5-6.5 s late: the
/// p99 of a whole run with one such pause.) What is left of the lease at the
/// instant, 3 s, is the margin it acts within (`jetcron-executor`'s `lease`).
pub fn default_ack_wait(replicas: usize) -> Duration {
    default_lookahead(replicas) + Duration::from_secs(3)
}

/// Longest `--lookahead`: fires decided a minute ahead are already a long
/// time for an edit to wait.
pub const MAX_LOOKAHEAD: Duration = Duration::from_secs(60);

#[derive(Debug, Args, Clone)]
pub struct ExecutorArgs {
    /// Allow `shell` targets (off by default: they run commands on this host).
    #[arg(long, env = "JETCRON_ENABLE_SHELL")]
    pub enable_shell: bool,
    /// Working directory of shell targets.
    #[arg(long, env = "JETCRON_SHELL_WORKDIR")]
    pub shell_workdir: Option<PathBuf>,
    /// Most targets called at once: the call slots, shared among
    /// namespaces as --slot-sharing says.
    #[arg(long, env = "JETCRON_MAX_IN_FLIGHT", default_value_t = jetcron_executor::DEFAULT_MAX_IN_FLIGHT)]
    pub max_in_flight: usize,
    /// Most due events pulled and not called to their end, those held until
    /// their instants not counted (default: twice --max-in-flight).
    #[arg(long, env = "JETCRON_MAX_PULLED")]
    pub max_pulled: Option<usize>,
    /// How the call slots are shared: `fair` (per namespace, in turns, a
    /// reserve kept for namespaces with little running) or `fifo` (first
    /// come first served: one team's burst may hold every slot).
    #[arg(long, env = "JETCRON_SLOT_SHARING", default_value = "fair")]
    pub slot_sharing: jetcron_executor::fair_slots::Sharing,
    /// The call slots a namespace that holds as many as are free leaves to
    /// the others (default: an eighth of --max-in-flight).
    #[arg(long, env = "JETCRON_SLOT_RESERVE")]
    pub slot_reserve: Option<usize>,
    /// Largest output kept per attempt, in bytes.
    #[arg(long, env = "JETCRON_OUTPUT_LIMIT", default_value_t = jetcron_executor::DEFAULT_OUTPUT_LIMIT)]
    pub output_limit: usize,
    /// Name recorded in run events (default: <hostname>-<pid>).
    #[arg(long, env = "JETCRON_EXECUTOR_ID")]
    pub executor_id: Option<String>,
    /// How long shutdown waits for running attempts before handing them back.
    #[arg(long, env = "JETCRON_SHUTDOWN_GRACE", default_value = "30s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,
    /// Pools served, comma-separated or repeated (default: `default`).
    #[arg(
        long = "pool",
        env = "JETCRON_POOLS",
        value_delimiter = ',',
        default_value = "default"
    )]
    pub pools: Vec<String>,
    /// How long a silent executor keeps a due event before JetStream hands it
    /// to another: what bounds how late the fires a dead or stalled executor
    /// held start elsewhere. Set on the pool's consumer when an executor
    /// starts; give every executor of a pool the same. Default: the
    /// lookahead and 3 s (4.5s with --replicas 1, 13s on a cluster).
    #[arg(long, env = "JETCRON_ACK_WAIT", value_parser = humantime::parse_duration)]
    pub ack_wait: Option<Duration>,
    /// How long a silent executor keeps a due event delivered again (after
    /// a nak, or another executor's death or stall): the consumer's
    /// `backoff` after the first delivery. A redelivery lost on its way
    /// (its node killed as it was sent) costs its fire this much more;
    /// redeliveries are kept alive every half of it. At most --ack-wait.
    #[arg(long, env = "JETCRON_REDELIVERY_ACK_WAIT", default_value = "4s", value_parser = humantime::parse_duration)]
    pub redelivery_ack_wait: Duration,
    /// How often a running attempt tells JetStream (and its overlap claim)
    /// it is alive. Default: a third of the ack wait.
    #[arg(long, env = "JETCRON_PROGRESS_INTERVAL", value_parser = humantime::parse_duration)]
    pub progress_interval: Option<Duration>,
    /// Base URL of the console for the run links in alerts
    /// (`<url>/ui/runs/<run id>`); `jetcron all` defaults to its own gateway.
    #[arg(long, env = "JETCRON_CONSOLE_URL")]
    pub console_url: Option<String>,
    /// A PEM file of CA certificates trusted for alert mail (SMTP over TLS)
    /// besides the public roots.
    #[arg(long, env = "JETCRON_SMTP_CA_FILE")]
    pub smtp_ca_file: Option<PathBuf>,
}

#[derive(Debug, Args, Clone)]
pub struct ProjectorArgs {
    /// Most run events per ClickHouse insert.
    #[arg(long, env = "JETCRON_BATCH_SIZE", default_value_t = 20000)]
    pub batch_size: usize,
    /// Longest wait to fill a batch.
    #[arg(long, env = "JETCRON_BATCH_WAIT", default_value = "200ms", value_parser = humantime::parse_duration)]
    pub batch_wait: Duration,
    /// Durable consumer on JETCRON_RUNS; a new name replays the stream from
    /// its start (answers do not change: every table dedups).
    #[arg(long, env = "JETCRON_PROJECTOR_CONSUMER", default_value = jetcron_core::subjects::PROJECTOR_CONSUMER)]
    pub consumer: String,
    /// How long JetStream waits for a fetched event's ack before handing it
    /// out again: how late the events of a fetch lost with a NATS node (or
    /// a killed projector) reach ClickHouse. Set on the consumer when a
    /// projector starts.
    #[arg(long, env = "JETCRON_PROJECTOR_ACK_WAIT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub projector_ack_wait: Duration,
}

#[derive(Debug, Args, Clone)]
pub struct GatewayArgs {
    /// HTTP listen address.
    #[arg(long, env = "JETCRON_HTTP_ADDR", default_value = "127.0.0.1:8080")]
    pub http_addr: SocketAddr,
    /// Bearer token accepted on HTTP write routes; repeat (or comma-separate
    /// in the variable) to accept several. Without one, HTTP writes are refused.
    #[arg(
        long = "api-token",
        env = "JETCRON_API_TOKENS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub api_tokens: Vec<String>,
    /// A file with one accepted bearer token per line (`#` comments allowed).
    #[arg(long, env = "JETCRON_API_TOKEN_FILE")]
    pub api_token_file: Option<PathBuf>,
    /// Require a token on HTTP reads too (health probes and /metrics stay open).
    #[arg(long, env = "JETCRON_API_PROTECT_READS")]
    pub protect_reads: bool,
    /// Most jobs the bucket may hold; a put of a new job beyond it is refused.
    #[arg(long, env = "JETCRON_MAX_JOBS", default_value_t = jetcron_gateway::limits::DEFAULT_MAX_JOBS)]
    pub max_jobs: usize,
    /// Largest HTTP request body, in bytes (job definitions are also capped
    /// at 64 KiB whatever this says).
    #[arg(long, env = "JETCRON_HTTP_BODY_LIMIT", default_value_t = jetcron_gateway::limits::DEFAULT_HTTP_BODY_LIMIT)]
    pub http_body_limit: usize,
    /// How often to record missed fires of the last hour (scheduled times
    /// with no run past the grace) as `fire.missed` events in ClickHouse;
    /// `0s` turns it off. Several gateways may all scan: each fire is stored once.
    #[arg(long, env = "JETCRON_MISSED_SCAN_INTERVAL", default_value = "30s", value_parser = humantime::parse_duration)]
    pub missed_scan_interval: Duration,
    /// Longest wait for ClickHouse of a history read (`/v1/runs`,
    /// `/v1/stats`, a run): past it the read answers 503
    /// `history_unavailable`. Answers built around a job definition (a job,
    /// the console's job pages) wait at most 1 s for their history part and
    /// go out without it; nothing else waits for ClickHouse.
    #[arg(long, env = "JETCRON_CLICKHOUSE_TIMEOUT", default_value = "3s", value_parser = positive_duration)]
    pub clickhouse_timeout: Duration,
    /// Base URL of a Grafana with jetcron's dashboards (provisioned from
    /// infra/grafana); the console's overview links to them.
    #[arg(long, env = "JETCRON_GRAFANA_URL")]
    pub grafana_url: Option<String>,
    /// A console session ends after this long without a request.
    #[arg(long, env = "JETCRON_CONSOLE_IDLE_TIMEOUT", default_value = "1h", value_parser = humantime::parse_duration)]
    pub console_idle_timeout: Duration,
    /// A console session ends this long after its sign-in, however busy it
    /// is (at most 7 days).
    #[arg(long, env = "JETCRON_CONSOLE_SESSION_LIFETIME", default_value = "12h", value_parser = humantime::parse_duration)]
    pub console_session_lifetime: Duration,
    /// Behind a reverse proxy: take a client's address from the last entry
    /// of `X-Forwarded-For` (for the password sign-in's per-address limit)
    /// instead of the connection's peer, which is then the proxy. Only
    /// with a proxy that sets it: otherwise a client picks its own address.
    #[arg(long, env = "JETCRON_TRUST_FORWARDED_FOR")]
    pub trust_forwarded_for: bool,
    #[command(flatten)]
    pub oidc: OidcArgs,
}

/// Sign-in with the company's identity provider (OpenID Connect); all of
/// issuer, client id, client secret and redirect URL, or none
/// (docs/security.md, "Sign-in with an identity provider").
#[derive(Debug, Args, Clone)]
pub struct OidcArgs {
    /// The provider's issuer URL (its discovery document is
    /// `<issuer>/.well-known/openid-configuration`), e.g.
    /// `https://kc.example/realms/corp`.
    #[arg(long, env = "JETCRON_OIDC_ISSUER")]
    pub oidc_issuer: Option<String>,
    /// This console's client id at the provider.
    #[arg(long, env = "JETCRON_OIDC_CLIENT_ID")]
    pub oidc_client_id: Option<String>,
    /// The client's secret (or --oidc-client-secret-file).
    #[arg(long, env = "JETCRON_OIDC_CLIENT_SECRET", hide_env_values = true)]
    pub oidc_client_secret: Option<String>,
    /// A file holding the client's secret (one line).
    #[arg(long, env = "JETCRON_OIDC_CLIENT_SECRET_FILE")]
    pub oidc_client_secret_file: Option<PathBuf>,
    /// Where the provider sends the browser back: this console's
    /// `/ui/oidc/callback` as the browser reaches it, registered at the
    /// provider, e.g. `https://jetcron.example/ui/oidc/callback`.
    #[arg(long, env = "JETCRON_OIDC_REDIRECT_URL")]
    pub oidc_redirect_url: Option<String>,
    /// Scopes asked for besides `openid`, comma-separated.
    #[arg(
        long,
        env = "JETCRON_OIDC_SCOPES",
        value_delimiter = ',',
        default_value = "email,profile"
    )]
    pub oidc_scopes: Vec<String>,
    /// The ID token claim that lists a person's groups (bound with
    /// `group:<name>`).
    #[arg(long, env = "JETCRON_OIDC_GROUPS_CLAIM", default_value = "groups")]
    pub oidc_groups_claim: String,
    /// The claim that names a person (bound with `user:<name>`): email,
    /// preferred_username or sub.
    #[arg(long, env = "JETCRON_OIDC_USER_CLAIM", default_value = "email")]
    pub oidc_user_claim: String,
    /// How far the gateway's clock and the provider's may differ: an ID
    /// token is taken until this long after it expires, and refused when
    /// issued further in the future.
    #[arg(long, env = "JETCRON_OIDC_CLOCK_LEEWAY", default_value = "60s", value_parser = humantime::parse_duration)]
    pub oidc_clock_leeway: Duration,
    /// What the sign-in button calls the provider ("Sign in with …").
    #[arg(
        long,
        env = "JETCRON_OIDC_NAME",
        default_value = "your company account"
    )]
    pub oidc_name: String,
}

impl OidcArgs {
    /// The gateway's provider settings: `None` without an issuer; an
    /// error naming what is missing when only some are given.
    pub fn settings(
        &self,
    ) -> anyhow::Result<Option<jetcron_gateway::people::provider::ProviderSettings>> {
        use anyhow::Context as _;
        let Some(issuer) = &self.oidc_issuer else {
            let stray = [
                ("--oidc-client-id", self.oidc_client_id.is_some()),
                ("--oidc-client-secret", self.oidc_client_secret.is_some()),
                (
                    "--oidc-client-secret-file",
                    self.oidc_client_secret_file.is_some(),
                ),
                ("--oidc-redirect-url", self.oidc_redirect_url.is_some()),
            ];
            if let Some((flag, _)) = stray.iter().find(|(_, given)| *given) {
                anyhow::bail!("{flag} is given without --oidc-issuer");
            }
            return Ok(None);
        };
        let secret = match (&self.oidc_client_secret, &self.oidc_client_secret_file) {
            (Some(secret), None) => secret.clone(),
            (None, Some(path)) => std::fs::read_to_string(path)
                .with_context(|| format!("--oidc-client-secret-file {}", path.display()))?
                .trim()
                .to_string(),
            (Some(_), Some(_)) => anyhow::bail!(
                "--oidc-client-secret and --oidc-client-secret-file are both given; give one"
            ),
            (None, None) => anyhow::bail!(
                "--oidc-issuer needs --oidc-client-secret or --oidc-client-secret-file"
            ),
        };
        let client_id = self
            .oidc_client_id
            .clone()
            .context("--oidc-issuer needs --oidc-client-id")?;
        let redirect_url = self.oidc_redirect_url.clone().context(
            "--oidc-issuer needs --oidc-redirect-url (this console's /ui/oidc/callback)",
        )?;
        let user_claim =
            jetcron_gateway::people::provider_claims::UserClaim::parse(&self.oidc_user_claim)
                .map_err(anyhow::Error::msg)?;
        Ok(Some(jetcron_gateway::people::provider::ProviderSettings {
            issuer: issuer.clone(),
            client_id,
            client_secret: secret,
            redirect_url,
            scopes: self
                .oidc_scopes
                .iter()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty() && s != "openid")
                .collect(),
            groups_claim: self.oidc_groups_claim.clone(),
            user_claim,
            clock_leeway: self.oidc_clock_leeway,
            display_name: self.oidc_name.clone(),
            key_refetch_gap: Duration::from_secs(10),
        }))
    }
}

#[derive(Debug, Args)]
pub struct AllArgs {
    #[command(flatten)]
    pub ticker: TickerArgs,
    #[command(flatten)]
    pub executor: ExecutorArgs,
    #[command(flatten)]
    pub projector: ProjectorArgs,
    #[command(flatten)]
    pub gateway: GatewayArgs,
}

#[derive(Debug, Args)]
pub struct ReqArgs {
    /// Subject, e.g. jetcron.api.jobs.put
    pub subject: String,
    /// Request body; `-` reads standard input, `@FILE` reads a file.
    pub body: String,
    /// How long to wait for the reply.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

#[derive(Debug, Args)]
pub struct NatsPermissionsArgs {
    /// The team's namespace (not `*`).
    #[arg(long)]
    pub namespace: String,
    /// viewer, operator, editor or admin.
    #[arg(long)]
    pub role: String,
}

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// The replica count the streams and buckets should have.
    #[arg(long)]
    pub replicas: usize,
    /// The servers that hold the existing streams when they are not the
    /// ones of --nats-url (a standalone server whose data moves into a new
    /// cluster); default: --nats-url.
    #[arg(long, value_parser = parse_server_list)]
    pub from: Option<ServerList>,
    /// Say what would change, change nothing.
    #[arg(long)]
    pub dry_run: bool,
}
