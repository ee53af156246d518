// Spec §6.4, the streaming payment channel, as the spec writes it. The payee is the second
// node's PeerId when two URLs are given, else the node's own.
//   node dist-examples/channel.js ws://NODE [ws://PAYEE_NODE]
import { check, nodeUrls, open, run, show } from './common.js';

run(async () => {
  const [url, payeeUrl] = nodeUrls();
  check(url, 'a node URL');
  const hyperspace = await open(url);
  try {
    let agentPeerId: string;
    if (payeeUrl) {
      const payee = await open(payeeUrl);
      agentPeerId = (await payee.node.info()).peerId;
      await payee.close();
    } else {
      agentPeerId = (await hyperspace.node.info()).peerId;
    }

    // Open channel with budget
    const channel = await hyperspace.micropayments.channel.open({
      payee: agentPeerId,
      budget: 5.0,
      currency: 'USDC',
    });
    show('micropayments.channel.open', channel.opened);
    check(channel.opened.budget === 5, 'budget 5.0');

    // Pay per token generated
    const first = await channel.pay(0.003, '42 tokens'); // nonce: 1
    const second = await channel.pay(0.003, '42 tokens'); // nonce: 2
    show('channel.pay ×2', [first, second]);
    check(first.nonce === 1 && second.nonce === 2, 'nonces 1 and 2');

    // Close — settle total, refund remainder
    const receipt = await channel.close();
    show('channel.close', receipt);
    // { totalSpent: 0.006, refund: 4.994 }
    check(receipt.totalSpent === 0.006, 'totalSpent: 0.006');
    check(receipt.refund === 4.994, 'refund: 4.994');
  } finally {
    await hyperspace.close();
  }
});
