// TransactWriteItems for dynalite, which has no transactions: enough of the real API for code
// that writes an item and its conditions in one transaction (Put, Update, Delete and
// ConditionCheck, with ReturnValuesOnConditionCheckFailure) to be tested locally.
//
// Every condition is checked against the items as they are, and only when all hold are the
// writes applied, in request order; otherwise nothing is written and the answer is a
// TransactionCanceledException with one cancellation reason per item, as DynamoDB sends it.
// Transactions run at once, as DynamoDB's do, and each holds its items from its checks to its
// last write: a transaction that reaches an item another one holds is cancelled with the
// reason TransactionConflict for that item (None for the others), as DynamoDB cancels
// concurrent transactions on one item. A request over 4 MB is refused (ValidationException).
// A single-item write (PutItem, UpdateItem…) sent at the same moment may land between a
// transaction's checks and its writes, which DynamoDB would refuse with TransactionConflict.
'use strict'
const crc32 = require('buffer-crc32') // dynalite's own, to sign answers as it does
const db = require('dynalite/db')
const validations = require('dynalite/validations')

const kinds = {
  Put: { action: require('dynalite/actions/putItem'), check: require('dynalite/validations/putItem') },
  Update: { action: require('dynalite/actions/updateItem'), check: require('dynalite/validations/updateItem') },
  Delete: { action: require('dynalite/actions/deleteItem'), check: require('dynalite/validations/deleteItem') },
  ConditionCheck: { action: null, check: require('dynalite/validations/deleteItem') },
}

const target = 'DynamoDB_20120810.TransactWriteItems'
const maxRequest = 4 * 1024 * 1024

// install makes server (a dynalite server) answer TransactWriteItems. It must be called with
// the store dynalite created (see storeOf).
module.exports = function install (server, store) {
  const [ original ] = server.listeners('request')
  server.removeAllListeners('request')
  const held = new Set() // the items of the transactions running: table NUL key
  server.on('request', (req, res) => {
    if (req.headers['x-amz-target'] !== target) return original(req, res)
    const chunks = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', () => {
      let body
      const raw = Buffer.concat(chunks)
      if (raw.length > maxRequest) {
        return send(res, 400, { __type: 'com.amazon.coral.validate#ValidationException', message: 'Transaction request size exceeds the maximum allowed size of 4 MB' })
      }
      try {
        body = JSON.parse(raw.toString() || '{}')
      }
      catch (e) {
        return send(res, 400, { __type: 'com.amazon.coral.service#SerializationException', Message: e.message })
      }
      transact(store, held, body).then(
        (out) => send(res, out.status, out.body),
        (err) => send(res, err.statusCode || 500, err.body || { __type: 'InternalFailure', message: String(err) }))
    })
  })
}

function send (res, status, body) {
  const s = JSON.stringify(body)
  res.statusCode = status
  res.setHeader('Content-Type', 'application/x-amz-json-1.0')
  res.setHeader('x-amz-crc32', crc32.unsigned(s)) // the SDK checks it
  res.setHeader('Content-Length', Buffer.byteLength(s))
  res.end(s)
}

function invalid (msg) {
  return { status: 400, body: { __type: 'com.amazon.coral.validate#ValidationException', message: msg } }
}

const call = (f, ...args) => new Promise((resolve, reject) => f(...args, (err, v) => err ? reject(err) : resolve(v)))

async function transact (store, held, body) {
  const items = body.TransactItems
  if (!Array.isArray(items) || items.length < 1 || items.length > 100) {
    return invalid('TransactItems must have between 1 and 100 items')
  }
  const ops = []
  const seen = new Set()
  for (const item of items) {
    const kind = Object.keys(item || {}).find((k) => kinds[k])
    if (!kind) return invalid('each TransactItem needs one of Put, Update, Delete, ConditionCheck')
    const raw = Object.assign({}, item[kind])
    const returnOld = raw.ReturnValuesOnConditionCheckFailure === 'ALL_OLD'
    delete raw.ReturnValuesOnConditionCheckFailure
    if (kind === 'ConditionCheck' && !raw.ConditionExpression) {
      return invalid('ConditionCheck needs a ConditionExpression')
    }
    let data
    try {
      data = validations.checkTypes(raw, kinds[kind].check.types)
      validations.checkValidations(data, kinds[kind].check.types, kinds[kind].check.custom, store)
    }
    catch (err) {
      if (err.statusCode) return { status: err.statusCode, body: err.body }
      throw err
    }
    const table = await call(store.getTable, data.TableName).catch((err) => err)
    if (table instanceof Error) return { status: table.statusCode || 400, body: table.body }
    const key = db.createKey(kind === 'Put' ? data.Item : data.Key, table)
    if (seen.has(data.TableName + '\u0000' + key)) {
      return invalid('Transaction request cannot include multiple operations on one item')
    }
    seen.add(data.TableName + '\u0000' + key)
    ops.push({ kind, data, key, returnOld, id: data.TableName + '\u0000' + key })
  }

  // No await between looking at the items held and holding them: the two are one step.
  if (ops.some((op) => held.has(op.id))) {
    const reasons = ops.map((op) => held.has(op.id)
      ? { Code: 'TransactionConflict', Message: 'Transaction is ongoing for the item' }
      : { Code: 'None' })
    return cancelled(reasons)
  }
  for (const op of ops) held.add(op.id)
  try {
    return await run(store, ops)
  }
  finally {
    for (const op of ops) held.delete(op.id)
  }
}

function cancelled (reasons) {
  return {
    status: 400,
    body: {
      __type: 'com.amazonaws.dynamodb.v20120810#TransactionCanceledException',
      message: 'Transaction cancelled, please refer cancellation reasons for specific reasons [' +
        reasons.map((r) => r.Code).join(', ') + ']',
      CancellationReasons: reasons,
    },
  }
}

async function run (store, ops) {
  const reasons = []
  let failed = false
  for (const op of ops) {
    const old = await call((k, cb) => store.getItemDb(op.data.TableName).get(k, cb), op.key)
      .catch((err) => { if (err.name === 'NotFoundError') return undefined; throw err })
    if (db.checkConditional(op.data, old) != null) {
      failed = true
      const r = { Code: 'ConditionalCheckFailed', Message: 'The conditional request failed' }
      if (op.returnOld && old) r.Item = old
      reasons.push(r)
    }
    else {
      reasons.push({ Code: 'None' })
    }
  }
  if (failed) return cancelled(reasons)
  for (const op of ops) {
    if (!kinds[op.kind].action) continue
    // The conditions held: write without checking them again.
    delete op.data._condition
    delete op.data.Expected
    delete op.data.ReturnValues
    await call(kinds[op.kind].action, store, op.data)
  }
  return { status: 200, body: {} }
}

// storeOf returns a function that calls dynalite(options) and also hands back the store it
// made, which dynalite keeps to itself.
module.exports.storeOf = function storeOf (dynalite, options) {
  const create = db.create
  let store
  db.create = (o) => (store = create(o))
  try {
    const server = dynalite(options)
    return { server, store }
  }
  finally {
    db.create = create
  }
}
