// Package admin is EMQ's admin surface: what an operator sees and does
// with the jobs a broker holds, whoever asks (emq's commands, the
// dashboard, a script, a monitoring system).
//
// It owns the API interface (api.go) and its three implementations:
//
//	Live     in process, on a running broker.Broker, through the broker's
//	         named API alone (it can reach no loop field: broker/api.go)
//	Client   over HTTP, on a broker's admin listener (emq's admin commands)
//	Offline  on a journal no broker holds (a stopped broker's file, or a
//	         group's journal in etcd while no broker leads)
//
// One table of calls (api_test.go) checks that the three answer alike.
// The bulk actions, the queue listing and the making of schedules are
// the same code online and offline (bulk.go, broker.StoredQueues,
// broker.MakeSchedule).
//
// It also owns the admin listener, Server (server.go): the HTTP routes
// below over the API of the broker it serves (Serve; none while a
// group's broker stands by), the guard and the tokens (guard.go), the
// dashboard's files and sessions (dashboard.go), the event and overview
// streams (sse.go), /metrics (metrics.go, fed by the broker as its
// broker.Observer), and on the same port EventMQ's emq-cli's eMQP
// commands (emqcli.go). Nothing here holds broker state; package broker
// imports nothing of it. cmd/emq builds a Server beside each broker it
// runs, and for a group's member (cmd/emq/group.go).
//
// # The HTTP API
//
// On Options.Addr, JSON under /api/v1 (routes.go):
//
//	GET    /healthz, /readyz                 process up; journal open, replayed, sockets bound
//	GET    /metrics                          Prometheus text format
//	GET    /api/v1/stats                     counters (pub/sub's too, when it is on)
//	GET    /api/v1/queues                    []QueueInfo, with each queue's controls
//	GET    /api/v1/queues/{queue}[?unknown=empty]   one queue's load for autoscalers: a broker.QueueLoad; 404 for a queue the broker does not know (queue.go)
//	GET    /api/v1/workers                   []WorkerInfo
//	GET    /api/v1/jobs?queue=&state=&limit=&after=&msgid_prefix=&header=&error=&older_than=&newer_than=
//	                                         a page of JobInfo (state pending, inflight, dead, done or cancelled; bulk.go)
//	GET    /api/v1/jobs/{msgid}[?payload=1]  one JobInfo with its trail; the whole payload (and a done job's result) in base64 when asked
//	DELETE /api/v1/jobs/{msgid}              delete a job in any state
//	POST   /api/v1/jobs/{msgid}/retry        a dead job back to its queue
//	POST   /api/v1/jobs/{msgid}/cancel       cancel a pending, delayed or in-flight job; the JobInfo as it was cancelled
//	POST   /api/v1/jobs/cancel?[state=pending|inflight&]FILTERS[&confirm=yes]   bulk cancel; counts only without confirm
//	POST   /api/v1/dead/retry, /dead/remove?FILTERS[&confirm=yes]   every dead job the filters match; counts only without confirm
//	POST   /api/v1/queues/{queue}/purge?confirm={queue}   delete the queue's pending jobs
//	POST   /api/v1/queues/{queue}/pause, /resume, /settings   an operator's controls
//	GET    /api/v1/queues/{queue}/tenants?offset=&limit=   a broker.TenantPage, the largest backlog first
//	PATCH  /api/v1/queues/{queue}/tenants/{tenant}   a tenant's own settings (broker.TenantChange); .../tenants/ is the tenant ""
//	GET    /api/v1/limiters                  []broker.LimiterInfo, by name
//	PUT    /api/v1/limiters/{name}           make or replace a named limiter (store.LimiterSettings)
//	DELETE /api/v1/limiters/{name}
//	GET    /api/v1/jobs/{msgid}/why          why the job is where it is: a broker.Why (flow.go)
//	GET    /api/v1/events?queue=&msgid=      Server-Sent Events as things happen (sse.go)
//	POST   /api/v1/compact                   rewrite the journal without free space
//	POST   /api/v1/journal/rekey[?rate=N]    seal again under the journal's first key what is under older ones, N values a second: 202 with a store.RekeyStatus (rekey.go)
//	GET    /api/v1/journal/rekey             the rekey's progress, under way or the last: a store.RekeyStatus
//	GET    /api/v1/schedules?limit=&after=    a SchedulePage, by id
//	POST   /api/v1/schedules                 add one: {"queue", "every" (30s) or "cron", "headers", "payload" or "payload_base64"}
//	GET    /api/v1/schedules/{id}[?payload=1]
//	DELETE /api/v1/schedules/{id}
//	POST   /api/v1/schedules/{id}/pause, /resume
//	GET    /api/v1/overview[/stream]          the dashboard's first page, once or once a second (dashboard.go)
//	GET    /api/v1/jobs/{msgid}/payload   the whole payload, as a download
//	GET    /api/v1/jobs/{msgid}/result[?wait=30s]   the result, waited for up to wait (jobs.go): 200, 202 not done, 404, 409 dead or cancelled, 410 not kept
//	POST   /api/v1/queues/{queue}/jobs       send a job (a raw body, or JSON) or a bulk (a JSON array, JSON lines): 201 {"msgid"} or {"msgids"} once durable (jobs.go)
//	POST   /api/v1/jobs/remove?state=pending|dead|done|cancelled&FILTERS[&confirm=yes]   bulk delete; counts only without confirm
//	GET    /, /ui/...                         the dashboard, and its login (dashboard.go)
//	GET    /api/v1/openapi.json              this API described in OpenAPI 3.1 (openapi.go)
//
// Every request must name this listener as its Host, and one that changes
// something needs the header X-EMQ-Admin (or a JSON body) and, from a
// browser, this listener's origin: guard.go keeps other sites' pages
// out. With a Token every request needs "Authorization: Bearer TOKEN" or
// a dashboard session of that token; a ReadToken (or its session) may be
// used instead for GETs only (403 otherwise), a ProducerToken for
// sending jobs and reading results only; the dashboard's files and
// login need neither. Payloads and results (previews included) are
// shown to the Token, and to the ReadToken or, with no token set, to
// every caller as Options.ShowPayloads says; to others a job is its
// sizes and metadata, and what answers with payload bytes is 403
// payload_hidden. Each payload or result handed out is an event
// (payloads.go). Without a token, Validate refuses a non-loopback
// Addr. With TLSCert and TLSKey it is HTTPS. Errors are {"error": "a
// sentence", "code": "a class"} with a status by class (errors.go): 400 a
// bad parameter or filter, 401 no token, 403 a cross-site request, a
// change with the read-only token or a payload hidden from the caller,
// 421 a foreign Host, 404 no such job, 409 a job in the wrong state for
// the change (or a rekey of a journal without keys), 501 not done by this journal (compact), 503 the broker is
// stopping (or a standby: who leads), 500 the journal failed (I/O).
package admin
