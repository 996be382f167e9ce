// The Java producer sending keyed records over many topics and partitions, for
// bench/test_bench_scale.py (peers.JavaKeyedProducer runs it with java's source-file mode,
// against the kafka-clients jar `make kafka` fetched).  Kafka's ProducerPerformance sends
// null keys to one topic, so it cannot spread records by key nor over 1,000 topics.
//
//   java -cp 'LIBS/*' KeyedProducer.java BOOTSTRAP TOPICS_FILE KEYS PAYLOAD_FILE RECORDS \
//       [name=value ...]
//
// TOPICS_FILE: one topic per line; KEYS: how many distinct keys ("key-0" ...); PAYLOAD_FILE:
// values separated by newlines; the name=value pairs are producer settings.  Record i goes
// to topic i % topics with key i % KEYS and value i % values: the sequence the Python
// clients of the suite send.  One JVM serves every round: it answers each "round" line on
// its input by sending RECORDS records and flushing, then prints "keyed-producer done N"
// (or "keyed-producer failed N FIRST-ERROR" when N records failed); it exits at the end of
// its input.  Its lines start with "keyed-producer " so that the client's own logging
// around them does not matter.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class KeyedProducer {
    private static final String PREFIX = "keyed-producer ";

    public static void main(String[] args) throws Exception {
        if (args.length < 5) {
            throw new IllegalArgumentException(
                "usage: KeyedProducer BOOTSTRAP TOPICS_FILE KEYS PAYLOAD_FILE RECORDS [name=value ...]");
        }
        List<String> topics = Files.readAllLines(Path.of(args[1]), StandardCharsets.UTF_8);
        byte[][] keys = new byte[Integer.parseInt(args[2])][];
        for (int i = 0; i < keys.length; i++) {
            keys[i] = ("key-" + i).getBytes(StandardCharsets.US_ASCII);
        }
        byte[][] values = split(Files.readAllBytes(Path.of(args[3])));
        int records = Integer.parseInt(args[4]);
        Properties settings = new Properties();
        settings.put("bootstrap.servers", args[0]);
        for (int i = 5; i < args.length; i++) {
            String[] setting = args[i].split("=", 2);
            if (setting.length != 2) {
                throw new IllegalArgumentException("a producer setting is name=value, got " + args[i]);
            }
            settings.put(setting[0], setting[1]);
        }
        AtomicLong failed = new AtomicLong();
        AtomicReference<Exception> firstError = new AtomicReference<>();
        // Errors only, as the Python clients of the suite report them.
        Callback callback = (metadata, exception) -> {
            if (exception != null) {
                failed.incrementAndGet();
                firstError.compareAndSet(null, exception);
            }
        };
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(
                 settings, new ByteArraySerializer(), new ByteArraySerializer());
             BufferedReader commands = new BufferedReader(
                 new InputStreamReader(System.in, StandardCharsets.US_ASCII))) {
            say("ready");
            for (String line; (line = commands.readLine()) != null; ) {
                if (!line.equals("round")) {
                    throw new IllegalArgumentException("unknown command " + line);
                }
                for (int i = 0; i < records; i++) {
                    producer.send(new ProducerRecord<>(topics.get(i % topics.size()),
                        keys[i % keys.length], values[i % values.length]), callback);
                }
                producer.flush();
                long failures = failed.getAndSet(0);
                Exception error = firstError.getAndSet(null);
                say(failures == 0 ? "done " + records : "failed " + failures + " " + error);
            }
        }
    }

    private static void say(String message) {
        System.out.println(PREFIX + message);
        System.out.flush();
    }

    /** The newline-separated values of a payload file. */
    private static byte[][] split(byte[] data) {
        List<byte[]> values = new ArrayList<>();
        int start = 0;
        for (int i = 0; i <= data.length; i++) {
            if (i == data.length || data[i] == '\n') {
                byte[] value = new byte[i - start];
                System.arraycopy(data, start, value, 0, value.length);
                values.add(value);
                start = i + 1;
            }
        }
        return values.toArray(new byte[0][]);
    }
}
