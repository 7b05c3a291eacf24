"""Apache Kafka's broker jars, resolved once with Maven into a cache folder, offline afterwards.

The tests of Kafka behaviour run against Apache Kafka itself (transactions,
DeleteRecords, CreatePartitions, topic IDs, replication, SCRAM, ACLs), which
the embedded tansu broker does not implement. Kafka's broker is the
``org.apache.kafka:kafka_2.13`` artifact with its runtime dependencies; its
admin tools (the consumer-group tool) are ``kafka-tools``. Maven resolves
both, with a log4j2 backend, into ``<cache>/apache-kafka/<version>/libs``; a
stamp file marks a complete install, so later runs need neither Maven nor the
network. The first install downloads ~55 MB (about 30 s here).

The cache is ``$EASYONLINE_CACHE`` when set, else ``.cache/`` of the checkout
(git ignores it), else ``~/.cache/easyonline``.
"""
import os
import shutil
import subprocess
import tempfile

KAFKA_VERSION = "4.1.1"
LOG4J_VERSION = "2.24.3"
SLF4J_VERSION = "2.0.17"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>easyonline</groupId><artifactId>apache-kafka-broker</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>{kafka}</version>
      <exclusions><exclusion><groupId>org.apache.kafka</groupId><artifactId>connect-runtime</artifactId></exclusion>
      </exclusions></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>{slf4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId><version>{log4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>{log4j}</version></dependency>
  </dependencies>
</project>
"""


def cache_dir() -> str:
    """Where downloaded tools are kept (see the module docstring)."""
    if os.environ.get("EASYONLINE_CACHE"):
        return os.environ["EASYONLINE_CACHE"]
    checkout = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if os.path.isdir(os.path.join(checkout, ".git")):
        return os.path.join(checkout, ".cache")
    return os.path.join(os.path.expanduser("~"), ".cache", "easyonline")


def kafka_home(version: str = KAFKA_VERSION) -> str:
    return os.path.join(cache_dir(), "apache-kafka", version)


def installed_libs(version: str = KAFKA_VERSION) -> str:
    """The folder of the broker's jars; RuntimeError naming ``install`` when they are not there."""
    libs = os.path.join(kafka_home(version), "libs")
    if not os.path.exists(os.path.join(kafka_home(version), "installed")):
        raise RuntimeError(f"Apache Kafka {version} is not installed in {kafka_home(version)}: run "
                           "python -m easyonline.tools.apache_kafka --install (needs Java 17+ and Maven)")
    return libs


def java_binary() -> str:
    """``$JAVA_HOME/bin/java`` or java on the PATH; RuntimeError when there is none."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise RuntimeError("Apache Kafka needs Java 17 or newer: no java on the PATH (or in $JAVA_HOME)")
    return java


def install(version: str = KAFKA_VERSION, quiet: bool = True) -> str:
    """Resolves the broker's jars with Maven (once; a complete install is reused offline); returns libs."""
    home = kafka_home(version)
    stamp = os.path.join(home, "installed")
    libs = os.path.join(home, "libs")
    if os.path.exists(stamp):
        return libs
    mvn = shutil.which("mvn")
    if not mvn:
        raise RuntimeError("installing Apache Kafka needs Maven (mvn on the PATH) the first time")
    java_binary()
    os.makedirs(home, exist_ok=True)
    pom = os.path.join(home, "pom.xml")
    with open(pom, "w", encoding="utf-8") as f:
        f.write(_POM.format(kafka=version, log4j=LOG4J_VERSION, slf4j=SLF4J_VERSION))
    staging = tempfile.mkdtemp(prefix="libs-", dir=home)
    command = [mvn, "-B", "-f", pom, f"-Dmaven.repo.local={os.path.join(cache_dir(), 'm2')}",
               "dependency:copy-dependencies", f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]
    if quiet:
        command.insert(1, "-q")
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if done.returncode != 0 or not any(n.startswith("kafka_2.13-") for n in os.listdir(staging)):
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError(f"Maven could not resolve org.apache.kafka:kafka_2.13:{version} "
                           f"(exit {done.returncode}):\n{done.stdout[-3000:]}")
    shutil.rmtree(libs, ignore_errors=True)
    os.rename(staging, libs)
    with open(stamp, "w", encoding="utf-8") as f:
        f.write(version + "\n")
    return libs
