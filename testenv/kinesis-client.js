// An independent Kinesis client for kinesistest's tests: the AWS SDK for JavaScript v3 puts
// records, registers a consumer and reads the records back over SubscribeToShard (HTTP/2, the
// event-stream encoding), then prints what it read as one JSON line.
// Usage: NODE_EXTRA_CA_CERTS=<server cert> node kinesis-client.js <endpoint> <stream> <records>
'use strict'
const {
  KinesisClient, PutRecordsCommand, DescribeStreamSummaryCommand, RegisterStreamConsumerCommand,
  DescribeStreamConsumerCommand, SubscribeToShardCommand,
} = require('@aws-sdk/client-kinesis')

async function main () {
  const [endpoint, stream, count] = process.argv.slice(2)
  const n = Number(count)
  const client = new KinesisClient({
    endpoint, region: 'us-east-1', credentials: { accessKeyId: 'AKIDJS', secretAccessKey: 'js' },
  })
  const entries = []
  for (let i = 0; i < n; i++) entries.push({ Data: Buffer.from('js-' + i), PartitionKey: 'k' })
  const put = await client.send(new PutRecordsCommand({ StreamName: stream, Records: entries }))
  if (put.FailedRecordCount) throw new Error(put.FailedRecordCount + ' records failed')
  const sum = await client.send(new DescribeStreamSummaryCommand({ StreamName: stream }))
  const streamARN = sum.StreamDescriptionSummary.StreamARN
  const reg = await client.send(new RegisterStreamConsumerCommand({ StreamARN: streamARN, ConsumerName: 'js' }))
  const consumerARN = reg.Consumer.ConsumerARN
  for (;;) {
    const d = await client.send(new DescribeStreamConsumerCommand({ ConsumerARN: consumerARN }))
    if (d.ConsumerDescription.ConsumerStatus === 'ACTIVE') break
    await new Promise(resolve => setTimeout(resolve, 20))
  }
  const sub = await client.send(new SubscribeToShardCommand({
    ConsumerARN: consumerARN, ShardId: 'shardId-000000000000', StartingPosition: { Type: 'TRIM_HORIZON' },
  }))
  const read = []
  let continuation = null
  for await (const ev of sub.EventStream) {
    if (!ev.SubscribeToShardEvent) continue
    for (const r of ev.SubscribeToShardEvent.Records) read.push(Buffer.from(r.Data).toString())
    continuation = ev.SubscribeToShardEvent.ContinuationSequenceNumber
    if (read.length >= n) break
  }
  console.log(JSON.stringify({ read, continuation, http2: true }))
  client.destroy()
}

main().then(() => process.exit(0), err => { console.error(err); process.exit(1) })
