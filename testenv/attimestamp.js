// kinesalite's GetShardIterator AT_TIMESTAMP looks for the shard's first record that arrived at
// or after the timestamp and never answers when there is none: its scan ends without calling
// back. The service answers with an iterator at the tip: the next record put is the first
// read. This wraps the stock action so kinesalite answers the same way, before kinesalite
// loads it.
//
// Under the stream's lock, which PutRecord and PutRecords hold while they assign sequence
// numbers and write, it looks for such a record: when there is one, the stock action answers;
// when there is none, the stock action answers for LATEST, still under the lock, so that no
// record put meanwhile can fall between the look and the iterator.
'use strict'
const path = require.resolve('kinesalite/actions/getShardIterator')
const stock = require(path)
const db = require('kinesalite/db')

function getShardIterator (store, data, cb) {
  const ts = data.Timestamp
  if (data.ShardIteratorType !== 'AT_TIMESTAMP' || ts == null || ts * 1000 > Date.now()) {
    return stock(store, data, cb)
  }
  let shardIx
  try {
    shardIx = db.resolveShardId(data.ShardId).shardIx
  } catch (e) {
    return stock(store, data, cb) // the stock action reports the bad shard id
  }
  store.metaDb.lock(data.StreamName, (release) => {
    cb = release(cb)
    const opts = { gt: db.shardIxToHex(shardIx), lt: db.shardIxToHex(shardIx + 1) }
    db.lazy(store.getStreamDb(data.StreamName).createReadStream(opts), cb)
      .filter((item) => item.value.ApproximateArrivalTimestamp >= ts)
      .take(1)
      .join((found) => {
        if (found.length > 0) return stock(store, data, cb)
        const latest = Object.assign({}, data, { ShardIteratorType: 'LATEST' })
        delete latest.Timestamp
        stock(store, latest, cb)
      })
  })
}

require.cache[path].exports = getShardIterator
