// Both emulators rethrow a request stream's 'error' event, so a client that gives up on a
// request mid-body (a context deadline, a cancelled call: what a consumer does on shutdown)
// would crash the whole server. The real services shrug that off; so does this guard.
'use strict'
module.exports = function guard (name) {
  process.on('uncaughtException', (err) => {
    if (err && (err.code === 'ECONNRESET' || err.message === 'aborted')) {
      console.error('%s: a client aborted a request (%s); still serving', name, err.message)
      return
    }
    console.error('%s: fatal:', name, err)
    process.exit(1)
  })
  process.on('SIGTERM', () => process.exit(0))
  process.on('SIGINT', () => process.exit(0))
}
