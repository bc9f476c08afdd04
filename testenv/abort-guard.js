// Keeps an emulator alive when a client hangs up before its response. kinesalite and dynalite
// throw from every request's 'error' event, and Node emits one ("aborted", ECONNRESET) for each
// request still unanswered when its connection closes: a consumer cancelling a poll on Close, or
// a request timing out, would otherwise end the whole server. Loaded with `node --require`.
'use strict'
process.on('uncaughtException', (err) => {
  if (err && err.code === 'ECONNRESET' && err.message === 'aborted') return
  console.error(err)
  process.exit(1)
})
